// Command example stores a memory in memoryd, retrieves it and prints the <memory> block:
//
//	go run ./example -target 127.0.0.1:50051 -user ana [-api-key KEY]
//
// It uses the generated stubs in memorydv1 directly; the API key travels as
// "authorization: Bearer KEY" metadata, like every memoryd client sends it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "memoryd.dev/client/memorydv1"
)

func main() {
	target := flag.String("target", envOr("MEMORYD_TARGET", "127.0.0.1:50051"), "memoryd host:port")
	apiKey := flag.String("api-key", os.Getenv("MEMORYD_API_KEY"), "API key (optional)")
	user := flag.String("user", "go-example", "user_id of the scope")
	flag.Parse()
	if err := run(*target, *apiKey, *user); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(target, apiKey, user string) error {
	conn, err := grpc.Dial(target, grpc.WithInsecure(), grpc.WithBlock(), grpc.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("dial %s: %w", target, err)
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md := metadata.Pairs("x-request-id", fmt.Sprintf("go-example-%d", time.Now().UnixNano()))
	if apiKey != "" {
		md.Append("authorization", "Bearer "+apiKey)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)

	health, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	fmt.Println("health:", health.GetStatus())

	client := pb.NewMemoryServiceClient(conn)
	scope := &pb.Scope{UserId: user}
	added, err := client.Add(ctx, &pb.AddRequest{
		Scope:   scope,
		Tier:    pb.Tier_TIER_LONG_TERM,
		Kind:    pb.Kind_KIND_PREFERENCE,
		Content: "Prefers window seats on long flights",
	})
	if err != nil {
		return fmt.Errorf("add: %s", status.Convert(err).Message())
	}
	fmt.Println("added:", added.GetMemoryId(), added.GetOperation())

	found, err := client.Retrieve(ctx, &pb.RetrieveRequest{Scope: scope, Query: "seat preference", TopK: 3})
	if err != nil {
		return fmt.Errorf("retrieve: %s", status.Convert(err).Message())
	}
	if found.GetRateLimited() {
		// Past the query rate: the items are a recent answer or none, not an empty memory.
		fmt.Println("retrieved: rate limited: the query rate limit was reached; retry later (memories may exist)")
	}
	for _, item := range found.GetItems() {
		fmt.Printf("retrieved: %.3f %s\n", item.GetScore(), item.GetContent())
	}

	block, err := client.RenderContext(ctx, &pb.RenderContextRequest{Scope: scope, Query: "seats"})
	if err != nil {
		return fmt.Errorf("render context: %s", status.Convert(err).Message())
	}
	if block.GetRateLimited() && block.GetContext() == "" {
		fmt.Println("context: rate limited: the query rate limit was reached; retry later (memories may exist)")
		return nil
	}
	fmt.Println(block.GetContext())
	return nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
