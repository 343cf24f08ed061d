// Package bench holds the scale benchmarks: Paddock on a three-server
// NATS cluster (events stream, KV buckets and object store at three
// replicas, sync always) driven by many simulated node agents. Its code is
// all in _test.go files: the no-op runtime the simulated nodes run is a load
// generator, not a runtime anyone can select. docs/scale.md gives the
// figures and the model built from them.
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/
package bench
