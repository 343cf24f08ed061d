#!/usr/bin/env bash
# Makes what deploy/compose.yaml needs in DIR, with the engine's own
# commands run from the paddock/engine image (no Go toolchain needed):
#
#   deploy/compose-setup.sh [--tag T] [--prefix P] [--port N] DIR
#
#   DIR/auth           identities (engine auth add): the engine, an admin
#                      (ops, which the CLI uses), nodes P-1 and P-2
#   DIR/conf           the three servers' configs (engine cluster config:
#                      route authorization, TLS with a CA of the cluster's own)
#   DIR/bin            paddock-supervisor, copied out of paddock/supervisor:T
#                      (the host's Docker bind-mounts it into sandboxes, so
#                      it lives at the same path on the host and in the nodes)
#   DIR/node-1, node-2 the nodes' supervisor sockets (same paths too)
#   DIR/compose.env    the variables compose.yaml reads (--env-file)
#   DIR/cli.env        the CLI's PADDOCK_URL, PADDOCK_CREDS and PADDOCK_TLS_CA
#                      (the admin's), also printed on stdout
#
# T is the images' tag (default latest: scripts/release.sh --images
# --tag-latest); P names the nodes (default paddock-node; sandboxes carry
# it in the label paddock.node, so two deployments on one host need two
# prefixes); N is the first of the three host ports (127.0.0.1) the NATS
# servers' client ports are published on (default 4222). DIR holds keys:
# keep it out of version control (.paddock/ is ignored). Running it again
# keeps the identities and the CA and rewrites the rest.
# `deploy/compose-setup.sh --remove-sandboxes DIR` removes the sandbox
# containers and volumes of DIR's nodes (after docker-compose down -v: a
# node's sandboxes outlive it by design, so that a restarted node
# reattaches them).
set -euo pipefail

tag=latest prefix=paddock-node port=4222 remove=false
while [ $# -gt 1 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --remove-sandboxes) remove=true; shift ;;
    *) echo "compose-setup: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,32p' "$0" >&2; exit 2; }
mkdir -p "$1"
D=$(cd "$1" && pwd)

if $remove; then
  # shellcheck disable=SC1091
  . "$D/compose.env"
  for n in "$PADDOCK_NODE_PREFIX-1" "$PADDOCK_NODE_PREFIX-2"; do
    c=$(docker ps -aq --filter "label=paddock.node=$n")
    [ -z "$c" ] || docker rm -f -v $c >/dev/null
    v=$(docker volume ls -q --filter "label=paddock.node=$n")
    [ -z "$v" ] || docker volume rm $v >/dev/null
  done
  exit 0
fi

engine() { docker run --rm -v "$D:$D" "paddock/engine:$tag" "$@"; }
for id in "engine engine" "admin ops" "node $prefix-1" "node $prefix-2"; do
  set -- $id
  if ! grep -q "\"name\": \"$2\"" "$D/auth/identities.json" 2>/dev/null; then
    engine auth add "$1" "$2" --auth-dir "$D/auth" >/dev/null 2>>"$D/setup.log"
  fi
done
engine cluster config --servers 3 --host nats-1,nats-2,nats-3 --listen-host 0.0.0.0 \
  --client-port 4222 --route-port 6222 --auth-dir "$D/auth" --store-dir /data \
  --max-store "${PADDOCK_MAX_STORE:-4g}" --out "$D/conf" >/dev/null 2>>"$D/setup.log"

mkdir -p "$D/bin" "$D/node-1" "$D/node-2"
c=$(docker create "paddock/supervisor:$tag")
docker cp "$c:/paddock-supervisor" "$D/bin/paddock-supervisor.tmp" && docker rm "$c" >/dev/null
chmod 0755 "$D/bin/paddock-supervisor.tmp" && mv "$D/bin/paddock-supervisor.tmp" "$D/bin/paddock-supervisor"

cat > "$D/compose.env" <<ENV
PADDOCK_DIR=$D
PADDOCK_TAG=$tag
PADDOCK_NODE_PREFIX=$prefix
PADDOCK_NATS_PORT_1=$port
PADDOCK_NATS_PORT_2=$((port + 1))
PADDOCK_NATS_PORT_3=$((port + 2))
ENV
cat > "$D/cli.env" <<ENV
PADDOCK_URL=nats://127.0.0.1:$port,nats://127.0.0.1:$((port + 1)),nats://127.0.0.1:$((port + 2))
PADDOCK_CREDS=$D/auth/creds/ops.creds
PADDOCK_TLS_CA=$D/conf/ca.pem
ENV
cat "$D/cli.env"
