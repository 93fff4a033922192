// Command driver is the load harness's Go client process (benchmarks/load.py --driver go):
// ghz's way of making calls (compiled, one connection, goroutine callers), so the client
// costs the shared cores little and adds little to each call's latency.
//
// One process runs one scenario with -c callers, each with one call in flight, until
// -start-at + -warmup + -z (or until each caller has recorded its share of -counts), and
// prints one JSON object: every recorded call's latency (ns), the status codes by Go name,
// the errors by message (ghz's "rpc error: code = X desc = Y") and the measured window
// (unix seconds). load.py merges the processes' objects into ghz's report
// (benchmarks/ghz_report.py), exactly as it does for its Python client processes.
//
// The requests are load.py's: same tiers, scopes, keys, users per caller and sizes; the
// texts come from the same word lists, picked by a Go RNG, so they differ from the Python
// driver's but stay unique per index (never deduplicated or cached).
//
// Build (GOPATH mode, Debian's packaged grpc/protobuf; load.py does this in a temp dir):
//
//	mkdir -p /tmp/gp/src/memoryd.dev && ln -s "$PWD/clients/go" /tmp/gp/src/memoryd.dev/client
//	ln -s "$PWD/benchmarks/driver" /tmp/gp/src/memoryd.dev/driver
//	GO111MODULE=off GOPATH=/tmp/gp:/usr/share/gocode go build -o driver memoryd.dev/driver
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "memoryd.dev/client/memorydv1"
)

const (
	filledUser  = "bench-filled"
	filledTalks = "bench-talks" // conversation turns, "Name: text"
)

var (
	who  = []string{"Ana", "The user", "Bob", "Maria", "The team", "Her manager", "Luis", "Priya"}
	does = []string{"prefers", "decided to use", "is allergic to", "asked about", "booked",
		"finished reading", "wants to learn", "complained about", "recommended", "moved away from"}
	what = []string{"green tea in the morning", "Postgres for the billing service", "shellfish",
		"a flight to Lisbon", "the quarterly roadmap", "Rust for the ingestion worker",
		"a standing desk", "the Heron public beta", "yoga classes on Thursdays",
		"dark mode in every editor", "the new CI pipeline", "a vegetarian diet",
		"the Kyoto trip itinerary", "weekly one-on-ones", "noise-cancelling headphones"}
	when = []string{"since last spring", "for the next release", "after the March incident",
		"on weekdays", "until the end of the year", "because of the budget review", "as of 2025",
		"when travelling"}
	speakers      = []string{"Ana", "Bob", "Maria", "Luis"}
	cachedQueries = []string{"what does the user drink in the morning",
		"which database did the team choose", "is anyone allergic to food",
		"where is the next trip", "what editor settings are preferred",
		"what is planned for the next release", "which classes are booked",
		"what changed in the CI pipeline"}
)

func pick(rng *rand.Rand, words []string) string { return words[rng.Intn(len(words))] }

func fact(n int64) string {
	rng := rand.New(rand.NewSource(n))
	return fmt.Sprintf("%s %s %s %s (note %d)", pick(rng, who), pick(rng, does), pick(rng, what),
		pick(rng, when), n)
}

func question(tag string) string {
	var seed int64
	for _, b := range []byte(tag) {
		seed = seed*131 + int64(b)
	}
	rng := rand.New(rand.NewSource(seed))
	return fmt.Sprintf("what does %s think about %s? [%s]", strings.ToLower(pick(rng, who)),
		pick(rng, what), tag)
}

// Turn n of a conversation: one of four speakers on one of the facts' topics.
func turn(n int64) string {
	rng := rand.New(rand.NewSource(n))
	return fmt.Sprintf("%s: I %s %s %s (note %d)", pick(rng, speakers), pick(rng, does),
		pick(rng, what), pick(rng, when), n)
}

// A question naming one of the filled conversation's speakers.
func talkQuestion(tag string) string {
	var seed int64
	for _, b := range []byte(tag) {
		seed = seed*131 + int64(b)
	}
	rng := rand.New(rand.NewSource(seed))
	return fmt.Sprintf("What did %s say about %s? [%s]", pick(rng, speakers), pick(rng, what), tag)
}

// ctx is who makes a call: the run, client process, caller and the caller's call number.
type callCtx struct {
	run          string
	proc, worker int
	seq          int64
}

func (c callCtx) caller() string { return fmt.Sprintf("%s-%d-%d", c.run, c.proc, c.worker) }

func (c callCtx) scope(user string, agent string) *pb.Scope {
	if user == "" {
		user = "bench-" + c.caller()
	}
	return &pb.Scope{UserId: user, AgentId: agent, SessionId: "s", TaskId: "t"}
}

// Disjoint per caller, so no two calls of a run send the same text.
func (c callCtx) longTermIndex() int64 {
	return int64(c.proc*1000+c.worker)*1_000_000 + c.seq
}

type invoke func(ctx context.Context, c callCtx) error

func scenarios(conn *grpc.ClientConn) map[string]invoke {
	health := grpc_health_v1.NewHealthClient(conn)
	memory := pb.NewMemoryServiceClient(conn)
	add := func(build func(c callCtx) *pb.AddRequest) invoke {
		return func(ctx context.Context, c callCtx) error {
			_, err := memory.Add(ctx, build(c))
			return err
		}
	}
	retrieve := func(build func(c callCtx) *pb.RetrieveRequest) invoke {
		return func(ctx context.Context, c callCtx) error {
			_, err := memory.Retrieve(ctx, build(c))
			return err
		}
	}
	return map[string]invoke{
		"health": func(ctx context.Context, c callCtx) error {
			_, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			return err
		},
		"add_working": add(func(c callCtx) *pb.AddRequest {
			return &pb.AddRequest{Scope: c.scope("", "agent"), Tier: pb.Tier_TIER_WORKING,
				Key: fmt.Sprintf("k%d", c.seq%50), Content: strings.Repeat("v", 64)}
		}),
		"add_short_term": add(func(c callCtx) *pb.AddRequest {
			return &pb.AddRequest{Scope: c.scope("", "agent"), Tier: pb.Tier_TIER_SHORT_TERM,
				Content: fmt.Sprintf("message %d: %s", c.seq, fact(c.seq))}
		}),
		"add_long_term": add(func(c callCtx) *pb.AddRequest {
			// A new user every 5,000 calls stays under the 10,000-memory quota.
			user := fmt.Sprintf("bench-%s-%d", c.caller(), c.seq/5000)
			return &pb.AddRequest{Scope: c.scope(user, "agent"), Tier: pb.Tier_TIER_LONG_TERM,
				Kind: pb.Kind_KIND_FACT, Content: fmt.Sprintf("%s [%s]", fact(c.longTermIndex()), c.run)}
		}),
		"add_turns": add(func(c callCtx) *pb.AddRequest {
			// Sessions of 20 turns, each after the first embedded after its lead and alone.
			user := fmt.Sprintf("bench-turns-%s-%d", c.caller(), c.seq/5000)
			scope := c.scope(user, "agent")
			scope.SessionId = fmt.Sprintf("s%d", c.seq/20)
			return &pb.AddRequest{Scope: scope, Tier: pb.Tier_TIER_LONG_TERM,
				Kind: pb.Kind_KIND_MESSAGE, Content: fmt.Sprintf("%s [%s]", turn(c.longTermIndex()), c.run)}
		}),
		"add_long_term_one_user": add(func(c callCtx) *pb.AddRequest {
			user := fmt.Sprintf("bench-one-%s-%d", c.run, c.seq/100)
			return &pb.AddRequest{Scope: c.scope(user, "agent"), Tier: pb.Tier_TIER_LONG_TERM,
				Kind:    pb.Kind_KIND_FACT,
				Content: fmt.Sprintf("%s [%s] one user", fact(c.longTermIndex()), c.run)}
		}),
		"add_persona": add(func(c callCtx) *pb.AddRequest {
			return &pb.AddRequest{Scope: c.scope("", "agent"), Tier: pb.Tier_TIER_PERSONA,
				Key:     fmt.Sprintf("preference %d", c.seq%200),
				Content: fmt.Sprintf("%s (%d)", what[c.seq%int64(len(what))], c.seq)}
		}),
		"add_episodic": add(func(c callCtx) *pb.AddRequest {
			// A new agent every 500 calls stays under the 1,000 episodes per agent.
			episode := &pb.Episode{
				Task: fmt.Sprintf("task %d: %s", c.seq, fact(c.seq)),
				Steps: []*pb.EpisodeStep{
					{Action: "searched the notes", Observation: "found two candidates"},
					{Action: "asked the user", Observation: "the user chose one"},
				},
				Outcome: "done", Success: true,
			}
			return &pb.AddRequest{Scope: c.scope("", fmt.Sprintf("agent-%d", c.seq/500)),
				Tier: pb.Tier_TIER_EPISODIC, Episode: episode}
		}),
		"add_structured": add(func(c callCtx) *pb.AddRequest {
			document, _ := json.Marshal(map[string]any{"type": "order", "n": c.seq,
				"item": what[c.seq%int64(len(what))], "qty": 2})
			user := fmt.Sprintf("bench-%s-%d", c.caller(), c.seq/2000)
			return &pb.AddRequest{Scope: c.scope(user, "agent"), Tier: pb.Tier_TIER_STRUCTURED,
				DocumentJson: string(document)}
		}),
		"add_batch": func(ctx context.Context, c callCtx) error {
			user := fmt.Sprintf("bench-%s-%d", c.caller(), c.seq/500)
			items := make([]*pb.AddRequest, 16)
			for i := range items {
				items[i] = &pb.AddRequest{Scope: c.scope(user, "agent"), Tier: pb.Tier_TIER_LONG_TERM,
					Content: fmt.Sprintf("%s [%s]", fact(c.longTermIndex()*16+int64(i)), c.run)}
			}
			_, err := memory.AddBatch(ctx, &pb.AddBatchRequest{Items: items})
			return err
		},
		"retrieve_cached": retrieve(func(c callCtx) *pb.RetrieveRequest {
			return &pb.RetrieveRequest{Scope: &pb.Scope{UserId: filledUser},
				Tiers: []pb.Tier{pb.Tier_TIER_LONG_TERM},
				Query: cachedQueries[c.seq%int64(len(cachedQueries))], TopK: 10}
		}),
		"retrieve_new": retrieve(func(c callCtx) *pb.RetrieveRequest {
			return &pb.RetrieveRequest{Scope: &pb.Scope{UserId: filledUser},
				Tiers: []pb.Tier{pb.Tier_TIER_LONG_TERM},
				Query: question(fmt.Sprintf("%s-%d", c.caller(), c.seq)), TopK: 10}
		}),
		"retrieve_talks": retrieve(func(c callCtx) *pb.RetrieveRequest {
			return &pb.RetrieveRequest{Scope: &pb.Scope{UserId: filledTalks},
				Tiers: []pb.Tier{pb.Tier_TIER_LONG_TERM},
				Query: talkQuestion(fmt.Sprintf("%s-%d", c.caller(), c.seq)), TopK: 10}
		}),
		"retrieve_empty": retrieve(func(c callCtx) *pb.RetrieveRequest {
			return &pb.RetrieveRequest{Scope: &pb.Scope{UserId: "bench-empty-" + c.caller()},
				Tiers: []pb.Tier{pb.Tier_TIER_LONG_TERM},
				Query: cachedQueries[c.seq%int64(len(cachedQueries))]}
		}),
		"render_context": func(ctx context.Context, c callCtx) error {
			budget := int32(500)
			_, err := memory.RenderContext(ctx, &pb.RenderContextRequest{
				Scope: &pb.Scope{UserId: filledUser},
				Query: question(fmt.Sprintf("render-%s-%d", c.caller(), c.seq)), TokenBudget: &budget})
			return err
		},
	}
}

// result is one caller's (then the process's) record, in load.py's shape.
type result struct {
	Latencies []int64        `json:"latencies"`
	Codes     map[string]int `json:"codes"`
	Errors    map[string]int `json:"errors"`
	Window    [2]float64     `json:"window"`
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func main() {
	target := flag.String("target", "127.0.0.1:50051", "memoryd host:port")
	name := flag.String("scenario", "health", "scenario (load.py's names)")
	run := flag.String("run", "00000", "run tag, in users and texts")
	proc := flag.Int("proc", 0, "this process's number")
	callers := flag.Int("c", 1, "callers in this process")
	firstWorker := flag.Int("first-worker", 0, "number of the first caller (across processes)")
	startAt := flag.Float64("start-at", 0, "unix time to start at (0: now)")
	warmup := flag.Float64("warmup", 0, "seconds of unrecorded calls first")
	duration := flag.Float64("z", 10, "seconds recorded (ignored with -counts)")
	counts := flag.String("counts", "", "calls each caller records, comma list (instead of -z)")
	timeout := flag.Float64("timeout", 30, "seconds per call")
	flag.Parse()

	conn, err := grpc.Dial(*target, grpc.WithInsecure(), grpc.WithBlock(), grpc.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver: dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	call, ok := scenarios(conn)[*name]
	if !ok {
		fmt.Fprintln(os.Stderr, "driver: unknown scenario", *name)
		os.Exit(2)
	}
	var wanted []int
	if *counts != "" {
		for _, part := range strings.Split(*counts, ",") {
			n, err := strconv.Atoi(part)
			if err != nil || len(wanted) >= *callers {
				fmt.Fprintln(os.Stderr, "driver: bad -counts", *counts)
				os.Exit(2)
			}
			wanted = append(wanted, n)
		}
	}
	start := time.Now()
	if *startAt > 0 {
		start = time.Unix(0, int64(*startAt*1e9))
	}
	measureFrom := start.Add(time.Duration(*warmup * 1e9))
	measureTo := measureFrom.Add(time.Duration(*duration * 1e9))
	perCall := time.Duration(*timeout * 1e9)
	time.Sleep(time.Until(start))

	results := make([]result, *callers)
	var wg sync.WaitGroup
	for i := 0; i < *callers; i++ {
		wg.Add(1)
		go func(index int) {
			defer wg.Done()
			r := result{Codes: map[string]int{}, Errors: map[string]int{}}
			first, last := time.Time{}, time.Time{}
			c := callCtx{run: *run, proc: *proc, worker: *firstWorker + index}
			for {
				begun := time.Now()
				if wanted == nil && !begun.Before(measureTo) {
					break
				}
				if wanted != nil && len(r.Latencies) >= wanted[index] {
					break
				}
				ctx, cancel := context.WithTimeout(context.Background(), perCall)
				err := call(ctx, c)
				elapsed := time.Since(begun)
				cancel()
				c.seq++
				if begun.Before(measureFrom) {
					continue // warm-up
				}
				r.Latencies = append(r.Latencies, elapsed.Nanoseconds())
				code := status.Code(err).String()
				r.Codes[code]++
				if err != nil {
					r.Errors[err.Error()]++
				}
				if first.IsZero() {
					first = begun
				}
				last = time.Now()
			}
			if !first.IsZero() {
				r.Window = [2]float64{unixSeconds(first), unixSeconds(last)}
			}
			results[index] = r
		}(i)
	}
	wg.Wait()

	total := result{Latencies: []int64{}, Codes: map[string]int{}, Errors: map[string]int{}}
	for _, r := range results {
		total.Latencies = append(total.Latencies, r.Latencies...)
		for k, v := range r.Codes {
			total.Codes[k] += v
		}
		for k, v := range r.Errors {
			total.Errors[k] += v
		}
		if len(r.Latencies) == 0 {
			continue
		}
		if total.Window[0] == 0 || r.Window[0] < total.Window[0] {
			total.Window[0] = r.Window[0]
		}
		if r.Window[1] > total.Window[1] {
			total.Window[1] = r.Window[1]
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(total); err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(1)
	}
}
