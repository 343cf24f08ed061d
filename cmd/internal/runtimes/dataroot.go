package runtimes

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/client"
)

// DockerRootDir asks the Docker daemon of the environment (DOCKER_HOST,
// else the local socket) for its data root; "" for a daemon that is not
// on this machine. It fails when the daemon does not answer within 5s.
func DockerRootDir(ctx context.Context) (string, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return "", fmt.Errorf("docker: %w", err)
	}
	defer cli.Close()
	if h := cli.DaemonHost(); h != "" && h != client.DefaultDockerHost && !isUnixHost(h) {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("docker info: %w", err)
	}
	return info.DockerRootDir, nil
}

func isUnixHost(h string) bool { return len(h) > 7 && h[:7] == "unix://" }
