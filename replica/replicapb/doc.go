// Package replicapb holds the protobuf messages llb replicas exchange over
// protoactor's remote: session-grain requests and replies, gossiped load
// state, and direct peer messages (health transitions, Tier-1 trie
// batches). replica.pb.go is generated from replica.proto by `make proto`
// (Debian's protobuf-compiler and protoc-gen-go v1.28.1) and committed, so
// a build needs no protoc.
package replicapb
