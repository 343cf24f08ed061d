package docker

// Every exec runs its argv through a POSIX shell wrapper, and the kills use
// only shell builtins, so the image needs nothing but /bin/sh (dash, bash
// or busybox ash) for them.
//
// An exec's first process is a session leader of the container's pid
// namespace (runc gives every exec its own session), and everything it
// starts stays in that session unless it calls setsid itself. So:
//
//   - the wrapper prints its pid (= the session id) as the first line of
//     stdout, which Exec takes off the stream;
//   - it runs the argv as a child ("$@": looked up in PATH; not found
//     exits 127, not executable 126, killed by a signal 128+n);
//   - when that child exits, it kills whatever is left in its session
//     (background children would otherwise hold the output open and
//     outlive the command, as the local runtime does not allow either) and
//     exits with the child's status;
//   - on a timeout or a cancelled context, Exec runs killScript in a second
//     exec as the same user, which freezes (SIGSTOP) every process of the
//     session, or descended from one, in rounds until no new one appears
//     (a frozen process cannot fork), then SIGKILLs them all. The pids
//     limit bounds the rounds.
//
// A process that calls setsid and double-forks escapes both kills (as it
// escapes the local runtime's process-group kill), but not the pids limit,
// Stop or Shutdown. Argv[0] naming a shell builtin (exit, cd, ...) runs
// the builtin.

// sessionScan freezes and kills the processes of session $s (and their
// descendants) except $me; processes of other users are out of reach of
// kill and are skipped. It expects IFS to be the default.
const sessionScan = `t=' '; n=0
while [ "$n" -lt 100 ]; do
  n=$((n + 1)); new=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    case $t in *" $p "*) continue;; esac
    { read -r l < "$d/stat"; } 2>/dev/null || continue
    set -- ${l##*) }
    case $1 in Z|X|x) continue;; esac
    hit=
    if [ "$4" = "$s" ] || [ "$3" = "$s" ]; then hit=1; else case $t in *" $2 "*) hit=1;; esac; fi
    if [ -n "$hit" ] && kill -s STOP "$p" 2>/dev/null; then t="$t$p "; new=1; fi
  done
  [ -n "$new" ] || break
done
for p in $t; do kill -s KILL "$p" 2>/dev/null; done
`

// wrapperScript is run as sh -c wrapperScript paddock-exec argv...
const wrapperScript = `echo "$$"
"$@"
c=$?
IFS=' 	
'
s=$$ me=$$
` + sessionScan + `exit "$c"
`

// processWrapperScript is wrapperScript for a process (StartProcess). The
// wrapper catches the signals a terminal sends its foreground process
// group (^C, ^\, ^Z), which holds the wrapper when the program does not
// take a group of its own: dying of them, it would skip the session scan;
// a caught signal is reset to its default in the program it runs, so the
// program gets them as usual.
const processWrapperScript = "trap : INT QUIT TSTP\n" + wrapperScript

// signalScript is run as sh -c signalScript paddock-signal <session id>
// <signal number> <all>; it sends the signal to every live process of the
// session, the session leader (the wrapper) included only when <all> is 1,
// and prints "signalled". One pass: unlike killScript it does not chase
// processes forked meanwhile.
const signalScript = `IFS=' 	
'
s=$1 sig=$2 all=$3 me=$$
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$me" ] && continue
  [ "$p" = "$s" ] && [ "$all" != 1 ] && continue
  { read -r l < "$d/stat"; } 2>/dev/null || continue
  set -- ${l##*) }
  case $1 in Z|X|x) continue;; esac
  [ "$4" = "$s" ] && kill -"$sig" "$p" 2>/dev/null
done
echo signalled
`

// killScript is run as sh -c killScript paddock-kill <session id>; it
// prints "killed" when done.
const killScript = `IFS=' 	
'
s=$1 me=$$
` + sessionScan + `echo killed
`
