package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// RemoveContainers force-removes every container (running or not) that
// matches the label filter ("key=value" or "key"), and fails the test if
// the engine refuses. Tests register it with t.Cleanup so that nothing
// they made outlives them.
func RemoveContainers(t testing.TB, cli *client.Client, label string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		t.Errorf("list containers %s: %v", label, err)
		return
	}
	for _, c := range list {
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("remove container %s: %v", c.ID, err)
		}
	}
}

// StartLabelledContainer starts a container of image with labels that
// sleeps until removed, as a foreign tool or a crashed create would leave
// one, and returns its id. The test's end removes it.
func StartLabelledContainer(t testing.TB, cli *client.Client, image string, labels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Labels: labels, Cmd: []string{"sleep", "3600"},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start container: %v", err)
	}
	return c.ID
}

// ContainerExists reports whether the container id exists (in any state).
func ContainerExists(t testing.TB, cli *client.Client, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cli.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("inspect container %s: %v", id, err)
	}
	return true
}
