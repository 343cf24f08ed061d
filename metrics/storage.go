package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamUsage is one JetStream stream's stored bytes against its limit.
type StreamUsage struct {
	Stream string
	Bytes  uint64
	// MaxBytes is the stream's max_bytes; 0 when it has none.
	MaxBytes int64
}

// StoreUsage is what a scrape reads of JetStream storage: the account's
// file store against its limit and each of Paddock's streams against
// theirs.
type StoreUsage struct {
	// Bytes is the file store the account uses, MaxBytes its limit (0 or
	// negative: none).
	Bytes    uint64
	MaxBytes int64
	Streams  []StreamUsage
}

// Disk is the free space of the filesystem that holds a watched
// directory (a state dir, a sandboxes' dir).
type Disk struct {
	Path        string
	Free, Total uint64
}

var (
	storeBytesDesc = prometheus.NewDesc(Namespace+"_jetstream_store_bytes",
		"File store the JetStream account uses, in bytes.", nil, nil)
	storeMaxDesc = prometheus.NewDesc(Namespace+"_jetstream_store_max_bytes",
		"The JetStream account's file store limit in bytes (absent when it has none).", nil, nil)
	streamBytesDesc = prometheus.NewDesc(Namespace+"_stream_bytes",
		"Bytes a Paddock stream stores, by stream (events, the object store's, the projections' buckets).", []string{"stream"}, nil)
	streamMaxDesc = prometheus.NewDesc(Namespace+"_stream_max_bytes",
		"A Paddock stream's max_bytes limit, by stream (absent when it has none).", []string{"stream"}, nil)
	storageUpDesc = prometheus.NewDesc(Namespace+"_storage_up",
		"1 when JetStream's storage usage could be read at this scrape, else 0.", nil, nil)
	diskFreeDesc = prometheus.NewDesc(Namespace+"_disk_free_bytes",
		"Bytes an unprivileged writer may still use on the filesystem of a watched directory, by path.", []string{"path"}, nil)
	diskTotalDesc = prometheus.NewDesc(Namespace+"_disk_total_bytes",
		"Size of the filesystem of a watched directory, by path.", []string{"path"}, nil)
)

// StorageTimeout bounds the storage read of one scrape.
const StorageTimeout = 2 * time.Second

// WatchStorage reports JetStream storage from read, called at every
// scrape within StorageTimeout: a failed read is paddock_storage_up 0 and
// no other sample. It fails if storage is watched twice.
func (m *Metrics) WatchStorage(read func(ctx context.Context) (StoreUsage, error)) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{storeBytesDesc, storeMaxDesc, streamBytesDesc, streamMaxDesc, storageUpDesc},
		collect: func(ch chan<- prometheus.Metric) {
			// A scrape carries no context; the read gets a bound of its own.
			ctx, cancel := context.WithTimeout(context.Background(), StorageTimeout)
			defer cancel()
			u, err := read(ctx)
			if err != nil {
				ch <- prometheus.MustNewConstMetric(storageUpDesc, prometheus.GaugeValue, 0)
				return
			}
			ch <- prometheus.MustNewConstMetric(storageUpDesc, prometheus.GaugeValue, 1)
			ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(u.Bytes))
			if u.MaxBytes > 0 {
				ch <- prometheus.MustNewConstMetric(storeMaxDesc, prometheus.GaugeValue, float64(u.MaxBytes))
			}
			for _, s := range u.Streams {
				ch <- prometheus.MustNewConstMetric(streamBytesDesc, prometheus.GaugeValue, float64(s.Bytes), s.Stream)
				if s.MaxBytes > 0 {
					ch <- prometheus.MustNewConstMetric(streamMaxDesc, prometheus.GaugeValue, float64(s.MaxBytes), s.Stream)
				}
			}
		},
	})
}

// WatchDisks reports the free space of the directories disks returns,
// called at every scrape (it should return what a watcher last read, not
// read the disks itself). It fails if disks are watched twice.
func (m *Metrics) WatchDisks(disks func() []Disk) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(funcCollector{
		descs: []*prometheus.Desc{diskFreeDesc, diskTotalDesc},
		collect: func(ch chan<- prometheus.Metric) {
			for _, d := range disks() {
				if d.Total == 0 { // not read yet, or unreadable
					continue
				}
				ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(d.Free), d.Path)
				ch <- prometheus.MustNewConstMetric(diskTotalDesc, prometheus.GaugeValue, float64(d.Total), d.Path)
			}
		},
	})
}
