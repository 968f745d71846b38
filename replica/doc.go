// Package replica makes one llbd process a replica of a router that runs as
// several processes: membership, session ownership, shared load and health,
// and Tier-1 teaching, on protoactor-go's cluster package with its etcd
// provider (patched: replica/etcdprovider) and the disthash identity lookup.
//
// It is named for what the process becomes in cluster mode — one replica of
// the router — and not "cluster", which is the protoactor package it builds
// on.
//
// Shape:
//   - Member runs the cluster membership in an actor system of its own,
//     apart from the data plane's. When the membership breaks — the etcd
//     lease is lost (a stall longer than the TTL), peers blocked this
//     member, or it fell out of its own member list — the whole
//     incarnation is torn down and a new one joins with a fresh member id:
//     protoactor blocks a departed id for the life of every peer, so only
//     a new id can come back. The data plane keeps routing on local state
//     meanwhile; everything here degrades to "miss", never to a stall.
//   - Sessions are Tier-0 session shards as cluster grains (kind
//     "llb-session", identity "<service>/<shard>"): one owner per shard
//     in the cluster, state a ladder.SessionShard. Lookups use a cache of
//     owner PIDs and the caller's deadline; a timeout is a session miss.
//     Grain state is a cache: a shard that moves (owner died, membership
//     changed) starts empty and is re-taught by the next pins.
//   - Load publishes this replica's per-endpoint in-flight counts and
//     breaker/probe states by gossip (~100 ms) and sends health transitions
//     to every peer at once; it returns peers' last values with their age.
//   - Teacher broadcasts Tier-1 trie inserts to peers in batches.
//
// The rule store (rules and controller instructions in etcd) is package
// rulestore; it does not need the cluster runtime.
package replica
