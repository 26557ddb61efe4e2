// gz-ring prints where go-zero's consistent_hash balancer sends each key: the ring of
// zrpc/internal/balancer/consistenthash (go-zero core/hash, 100 virtual nodes per address,
// murmur3.Sum64), built from the addresses of -addrs. No network: zrpc's tests compare its
// answers with zrpc's own ring.
//
//	gz-ring -addrs 127.0.0.1:8080,127.0.0.1:8081 [-keys 1000 | < keys.txt]
//
// With -keys N the keys are key-0 .. key-<N-1>; otherwise one key per stdin line. One JSON line
// per key: {"key":"key-0","hash":<murmur3.Sum64(key)>,"addr":"127.0.0.1:8081"}.
//
// The addresses are added in sorted order. go-zero's picker adds them in its map's order, which
// only matters where two addresses share a ring point (an address that is another one plus one
// digit, such as :80 and :801); zrpc takes the sorted order there, and so does this program.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/zeromicro/go-zero/core/hash"
)

// replicas is consistenthash.defaultReplicaCount in go-zero v1.10.3.
const replicas = 100

type line struct {
	Key  string `json:"key"`
	Hash uint64 `json:"hash"`
	Addr string `json:"addr"`
}

func main() {
	addrs := flag.String("addrs", "", "comma-separated server addresses")
	keys := flag.Int("keys", 0, "if > 0, use the keys key-0 .. key-<n-1> instead of stdin")
	flag.Parse()
	if *addrs == "" {
		fmt.Fprintln(os.Stderr, "gz-ring: -addrs is required")
		os.Exit(2)
	}
	nodes := strings.Split(*addrs, ",")
	sort.Strings(nodes)
	ring := hash.NewCustomConsistentHash(replicas, hash.Hash)
	for _, n := range nodes {
		ring.Add(n)
	}

	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	emit := func(key string) {
		node, ok := ring.Get(key)
		addr := ""
		if ok {
			addr = node.(string)
		}
		if err := enc.Encode(line{Key: key, Hash: hash.Hash([]byte(key)), Addr: addr}); err != nil {
			panic(err)
		}
	}
	if *keys > 0 {
		for i := 0; i < *keys; i++ {
			emit(fmt.Sprintf("key-%d", i))
		}
		return
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		emit(in.Text())
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "gz-ring:", err)
		os.Exit(1)
	}
}
