// Go side of the framing-overhead benchmark: N Health checks, then N working-tier Adds,
// one at a time; prints one JSON line per operation with the latencies in ms.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	pb "memoryd.dev/client/memorydv1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "memoryd host:port")
	n := flag.Int("n", 500, "calls per operation")
	user := flag.String("user", "bench-go", "user_id")
	flag.Parse()
	conn, err := grpc.Dial(*target, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	health := grpc_health_v1.NewHealthClient(conn)
	memory := pb.NewMemoryServiceClient(conn)
	scope := &pb.Scope{UserId: *user, AgentId: "a", TaskId: "t"}
	ops := []struct {
		name string
		call func(i int) error
	}{
		{"health", func(int) error {
			_, err := health.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
			return err
		}},
		{"add_working", func(i int) error {
			_, err := memory.Add(context.Background(), &pb.AddRequest{
				Scope: scope, Tier: pb.Tier_TIER_WORKING, Key: fmt.Sprintf("k%d", i%50), Content: "v",
			})
			return err
		}},
	}
	for _, op := range ops {
		for i := 0; i < 20; i++ { // warm-up
			if err := op.call(i); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		samples := make([]float64, 0, *n)
		for i := 0; i < *n; i++ {
			start := time.Now()
			if err := op.call(i); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			samples = append(samples, float64(time.Since(start).Nanoseconds())/1e6)
		}
		line, _ := json.Marshal(map[string]any{"client": "go", "op": op.name, "ms": samples})
		fmt.Println(string(line))
	}
}
