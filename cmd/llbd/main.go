// Command llbd is the llb daemon: an LLM-aware L7 load balancer.
package main

import "fmt"

func main() {
	fmt.Println("llbd: not yet wired")
}
