package logfield

// Field names of the cluster runtime (replica) and the shared rule store.
const (
	// Cluster is the cluster name.
	Cluster = "cluster"
	// Member is a cluster member id.
	Member = "member"
	// Incarnation counts a replica's cluster memberships since it started.
	Incarnation = "incarnation"
	// Key is a store key or namespace.
	Key = "key"
	// Revision is an etcd revision.
	Revision = "revision"
	// Members is a member count.
	Members = "members"
)
