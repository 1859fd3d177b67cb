// Go reference side of goro's side-by-side benchmarks.
//
// Usage: go-peers <workload> [N]
// GOMAXPROCS comes from the environment (compare.sh sets it per workload).
// Prints one line: RESULT <workload> go <ns_per_op> [key=value ...]
//
// The sync workloads (mutex_*, wg_*) are sync/mutex_test.go's and
// sync/waitgroup_test.go's benchmarks under RunParallel (see runParallel).
// chansync and prodcons100 are runtime/chan_test.go's benchmarkChanSync(0)
// and benchmarkChanProdCons(100, 0) with b.N = N; spawn is
// proc_test.go's benchmarkCreateGoroutines(procs=1). Shapes of the other
// workloads are documented in benches/peers/README.md and mirrored exactly
// by the Rust implementations in benches/peers/src.
//
// The network workloads (echo10k, idleconn) are in net.go.
//
// Build: GO111MODULE=off go build -o go-peers main.go net.go (stdlib only).
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const callsPerSched = 1000
const ring = 503

func defaultN(w string) int {
	switch w {
	case "yield":
		return 2000000
	case "spawn", "spawn_wait":
		return 1000000
	case "chansync":
		return 2000000
	case "prodcons100":
		return 5000000
	case "threadring":
		return 10000000
	case "select2":
		return 1000000
	case "rss":
		return 100000
	case "syscall":
		return 2000000
	case "preempt":
		return 50
	case "blocking", "blocking_guarded":
		return 10
	case "preempt_overhead":
		return 2000000000
	case "burst":
		return 50000
	case "idle":
		return 100
	case "trace":
		return 1000000
	case "echo10k":
		return 10 // round trips per connection (NET_CONNS of them)
	case "idleconn":
		return 10000 // connections
	case "mutex_uncontended", "wg_uncontended":
		return 50000000
	case "mutex", "mutex_slack", "mutex_work", "wg_adddone":
		return 10000000
	}
	return 1000000
}

func perOp(d time.Duration, ops int) float64 {
	if ops < 1 {
		ops = 1
	}
	return float64(d.Nanoseconds()) / float64(ops)
}

// yield: two goroutines on one P, each calling runtime.Gosched n times.
func yieldPingPong(n int) float64 {
	t := time.Now()
	var wg sync.WaitGroup
	wg.Add(2)
	for k := 0; k < 2; k++ {
		go func() {
			for i := 0; i < n; i++ {
				runtime.Gosched()
			}
			wg.Done()
		}()
	}
	wg.Wait()
	return perOp(time.Since(t), 2*n)
}

// spawn: BenchmarkCreateGoroutines (procs = 1).
func spawnChain(n int) float64 {
	c := make(chan bool)
	var f func(n int)
	f = func(n int) {
		if n == 0 {
			c <- true
			return
		}
		go f(n - 1)
	}
	t := time.Now()
	go f(n)
	<-c
	return perOp(time.Since(t), n)
}

// spawn_wait: spawn n goroutines from one goroutine; each signals a counting
// channel (buffered, cap n); then receive n times.
func spawnWait(n int) float64 {
	c := make(chan struct{}, n)
	t := time.Now()
	for i := 0; i < n; i++ {
		go func() { c <- struct{}{} }()
	}
	for i := 0; i < n; i++ {
		<-c
	}
	return perOp(time.Since(t), n)
}

// chansync: benchmarkChanSync(b, 0) verbatim (b.N = n).
func chanSync(n int) float64 {
	const CallsPerSched = callsPerSched
	procs := 2
	N := int32(n / CallsPerSched / procs * procs)
	c := make(chan bool, procs)
	myc := make(chan int)
	t := time.Now()
	for p := 0; p < procs; p++ {
		go func() {
			for {
				i := atomic.AddInt32(&N, -1)
				if i < 0 {
					break
				}
				for g := 0; g < CallsPerSched; g++ {
					if i%2 == 0 {
						<-myc
						myc <- 0
					} else {
						myc <- 0
						<-myc
					}
				}
			}
			c <- true
		}()
	}
	for p := 0; p < procs; p++ {
		<-c
	}
	return perOp(time.Since(t), n)
}

// prodcons100: benchmarkChanProdCons(b, 100, 0) verbatim (b.N = n).
func prodCons(n, chanSize int) float64 {
	const CallsPerSched = callsPerSched
	procs := runtime.GOMAXPROCS(-1)
	N := int32(n / CallsPerSched)
	c := make(chan bool, 2*procs)
	myc := make(chan int, chanSize)
	t := time.Now()
	for p := 0; p < procs; p++ {
		go func() {
			for atomic.AddInt32(&N, -1) >= 0 {
				for g := 0; g < CallsPerSched; g++ {
					myc <- 1
				}
			}
			myc <- 0
			c <- false
		}()
		go func() {
			for {
				v := <-myc
				if v == 0 {
					break
				}
			}
			c <- false
		}()
	}
	for p := 0; p < procs; p++ {
		<-c
		<-c
	}
	return perOp(time.Since(t), n)
}

// threadring: benchmarks-game thread-ring, 503 goroutines, unbuffered chans.
func threadRing(n int) (float64, time.Duration, int) {
	done := make(chan int)
	chans := make([]chan int, ring)
	for i := range chans {
		chans[i] = make(chan int)
	}
	for i := 0; i < ring; i++ {
		go func(id int, in, next chan int) {
			for {
				tok := <-in
				if tok == 0 {
					done <- id
					return
				}
				next <- tok - 1
			}
		}(i+1, chans[i], chans[(i+1)%ring])
	}
	t := time.Now()
	chans[0] <- n
	id := <-done
	d := time.Since(t)
	return perOp(d, n), d, id
}

// traceOverhead: the thread ring with runtime/trace off, then on (the
// trace streamed to a temporary file, as trace.Start does); returns the
// on/off ratio of ns per hop, both ns/hop, and trace.Stop's time.
func traceOverhead(n int) (float64, float64, float64, float64, int64) {
	off, _, _ := threadRing(n)
	f, err := os.CreateTemp("", "go-bench-trace-*.out")
	if err != nil {
		return 0, 0, 0, 0, 0
	}
	defer os.Remove(f.Name())
	if err := trace.Start(f); err != nil {
		return 0, 0, 0, 0, 0
	}
	on, _, _ := threadRing(n)
	t := time.Now()
	trace.Stop()
	stop := time.Since(t)
	f.Close()
	var size int64
	if st, err := os.Stat(f.Name()); err == nil {
		size = st.Size()
	}
	return on / off, off, on, float64(stop.Microseconds()) / 1e3, size
}

// select2: one goroutine selecting over two unbuffered channels, each fed by
// its own sender goroutine (n/2 values each). ns per received value.
func select2(n int) (float64, int) {
	half := n / 2
	a := make(chan int)
	b := make(chan int)
	t := time.Now()
	for _, ch := range []chan int{a, b} {
		go func(ch chan int) {
			for i := 0; i < half; i++ {
				ch <- i
			}
		}(ch)
	}
	got, na := 0, 0
	for got < 2*half {
		select {
		case <-a:
			got++
			na++
		case <-b:
			got++
		}
	}
	return perOp(time.Since(t), got), na
}

func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line[len("VmRSS:"):])
			kb, _ := strconv.ParseInt(fields[0], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// ctxSwitches: voluntary + involuntary context switches of every thread.
func ctxSwitches() int64 {
	tasks, _ := os.ReadDir("/proc/self/task")
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.TrimSpace(line[strings.Index(line, ":")+1:]), 10, 64)
				n += v
			}
		}
	}
	return n
}

// parkN starts n goroutines that each park on a receive from the returned
// channel (close it to end them), and returns once all have started.
func parkN(n int) chan struct{} {
	ch := make(chan struct{})
	var started int64
	for i := 0; i < n; i++ {
		go func() {
			atomic.AddInt64(&started, 1)
			<-ch
		}()
	}
	for atomic.LoadInt64(&started) < int64(n) {
		time.Sleep(time.Millisecond)
	}
	return ch
}

// idle: n goroutines parked, main asleep in time.Sleep; context switches
// of all threads per second over 2 s, after 300 ms to settle.
func idle(n int) float64 {
	ch := parkN(n)
	time.Sleep(300 * time.Millisecond)
	before := ctxSwitches()
	time.Sleep(2 * time.Second)
	after := ctxSwitches()
	close(ch)
	return float64(after-before) / 2
}

// rss: n goroutines parked on a receive from one channel; VmRSS delta / n.
func rss(n int) (float64, int64, int64, int) {
	time.Sleep(20 * time.Millisecond)
	before := vmRSS()
	ch := parkN(n)
	time.Sleep(50 * time.Millisecond)
	after := vmRSS()
	live := runtime.NumGoroutine()
	close(ch)
	return float64(after-before) / float64(n), before, after, live
}

// deep touches ~depth KiB of stack (1 KiB frames).
//
//go:noinline
func deep(depth int) int {
	var buf [1024]byte
	buf[7] = byte(depth)
	if depth == 0 {
		return int(buf[7])
	}
	return deep(depth-1) + int(buf[1000])
}

var sink int64

// burst: n goroutines each touch ~33 KiB of stack and park; all are
// released and exit; then the process idles 15 s. Returns the percent of
// the RSS growth still resident 15 s after they ended, and the RSS figures.
func burst(n int) (float64, int64, int64, int64, int64) {
	ch := make(chan struct{})
	var started, exited int64
	time.Sleep(20 * time.Millisecond)
	before := vmRSS()
	for i := 0; i < n; i++ {
		go func() {
			atomic.AddInt64(&sink, int64(deep(32)))
			atomic.AddInt64(&started, 1)
			<-ch
			atomic.AddInt64(&exited, 1)
		}()
	}
	for atomic.LoadInt64(&started) < int64(n) {
		time.Sleep(time.Millisecond)
	}
	peak := vmRSS()
	close(ch)
	for atomic.LoadInt64(&exited) < int64(n) {
		time.Sleep(time.Millisecond)
	}
	ended := time.Now()
	var at5 int64
	for s := 1; s <= 15; s++ {
		time.Sleep(time.Until(ended.Add(time.Duration(s) * time.Second)))
		if s == 5 {
			at5 = vmRSS()
		}
	}
	after := vmRSS()
	grown := peak - before
	if grown < 1 {
		grown = 1
	}
	return 100 * float64(after-before) / float64(grown), before, peak, at5, after
}

// ---------------------------------------------------------------------------
// Sync workloads: sync/mutex_test.go and sync/waitgroup_test.go benchmarks
// under b.RunParallel, with b.N = n. runParallel mirrors RunParallel:
// parallelism*GOMAXPROCS goroutines take iterations from a shared budget,
// grain at a time (RunParallel sizes its grain to ~100us of work, at most
// 1e4; a fixed 1000 here, the same in benches/peers/src/common.rs).

const grain = 1000

type pb struct {
	budget *int64
	cache  int64
}

func (p *pb) Next() bool {
	if p.cache == 0 {
		left := atomic.AddInt64(p.budget, -grain) + grain
		if left <= 0 {
			return false
		}
		if left > grain {
			left = grain
		}
		p.cache = left
	}
	p.cache--
	return true
}

func runParallel(n, parallelism int, body func(p *pb)) (float64, int) {
	workers := parallelism * runtime.GOMAXPROCS(0)
	budget := int64(n)
	var wg sync.WaitGroup
	wg.Add(workers)
	t := time.Now()
	for i := 0; i < workers; i++ {
		go func() {
			defer wg.Done()
			body(&pb{budget: &budget})
		}()
	}
	wg.Wait()
	return perOp(time.Since(t), n), workers
}

// BenchmarkMutexUncontended.
func mutexUncontended(n int) (float64, int) {
	type PaddedMutex struct {
		sync.Mutex
		pad [128]uint8
	}
	return runParallel(n, 1, func(p *pb) {
		var mu PaddedMutex
		for p.Next() {
			mu.Lock()
			mu.Unlock()
		}
	})
}

// benchmarkMutex(slack, work): BenchmarkMutex, BenchmarkMutexSlack,
// BenchmarkMutexWork.
func benchmarkMutex(n int, slack, work bool) (float64, int) {
	var mu sync.Mutex
	parallelism := 1
	if slack {
		parallelism = 10
	}
	return runParallel(n, parallelism, func(p *pb) {
		foo := 0
		for p.Next() {
			mu.Lock()
			mu.Unlock()
			if work {
				for i := 0; i < 100; i++ {
					foo *= 2
					foo /= 2
				}
			}
		}
		_ = foo
	})
}

// BenchmarkWaitGroupUncontended.
func waitGroupUncontended(n int) (float64, int) {
	type PaddedWaitGroup struct {
		sync.WaitGroup
		pad [128]uint8
	}
	return runParallel(n, 1, func(p *pb) {
		var wg PaddedWaitGroup
		for p.Next() {
			wg.Add(1)
			wg.Done()
			wg.Wait()
		}
	})
}

// BenchmarkWaitGroupAddDone (benchmarkWaitGroupAddDone(b, 0)).
func waitGroupAddDone(n int) (float64, int) {
	var wg sync.WaitGroup
	return runParallel(n, 1, func(p *pb) {
		for p.Next() {
			wg.Add(1)
			wg.Done()
		}
	})
}

// ---- preemption and system calls (issue 7) ----

// syscallGetpid: a short real system call through the runtime's
// entersyscall/exitsyscall (syscall.Syscall), one P; ns per call.
func syscallGetpid(n int) float64 {
	start := time.Now()
	for i := 0; i < n; i++ {
		syscall.Syscall(syscall.SYS_GETPID, 0, 0, 0)
	}
	return perOp(time.Since(start), n)
}

// hogLoop spins without function calls until stop is set.
func hogLoop(stop *int32) uint64 {
	x := uint64(1)
	for atomic.LoadInt32(stop) == 0 {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// preemptLateness: a goroutine sleeping 10 ms n times beside a hog on one
// P; returns the worst lateness in ms.
func preemptLateness(n int) float64 {
	var stop int32
	done := make(chan uint64)
	go func() { done <- hogLoop(&stop) }()
	worst := time.Duration(0)
	for i := 0; i < n; i++ {
		t := time.Now()
		time.Sleep(10 * time.Millisecond)
		if l := time.Since(t) - 10*time.Millisecond; l > worst {
			worst = l
		}
	}
	atomic.StoreInt32(&stop, 1)
	<-done
	return float64(worst.Microseconds()) / 1e3
}

// blockingSleeps: 8 goroutines each doing n nanosleeps of 50 ms on one P;
// returns the wall time in ms (ideal: n*50).
func blockingSleeps(n int) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: 50 * 1000 * 1000}
			for i := 0; i < n; i++ {
				syscall.Nanosleep(&ts, nil)
			}
		}()
	}
	wg.Wait()
	return float64(time.Since(start).Microseconds()) / 1e3
}

// preemptOverhead: 8 CPU-bound goroutines share n xorshift steps on the Ps;
// returns the wall time in ms.
func preemptOverhead(n int) float64 {
	var wg sync.WaitGroup
	var sink uint64
	start := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			x := seed + 1
			for i := 0; i < n/8; i++ { // xorshift64: no closed form to shortcut
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
			}
			atomic.AddUint64(&sink, x)
		}(uint64(g))
	}
	wg.Wait()
	return float64(time.Since(start).Microseconds()) / 1e3
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-peers <workload> [N]")
		os.Exit(2)
	}
	w := os.Args[1]
	n := defaultN(w)
	if len(os.Args) > 2 {
		v, err := strconv.Atoi(strings.ReplaceAll(os.Args[2], "_", ""))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad N:", os.Args[2])
			os.Exit(2)
		}
		n = v
	}
	procs := runtime.GOMAXPROCS(0)
	tail := fmt.Sprintf("n=%d procs=%d", n, procs)
	switch w {
	case "switch":
		fmt.Printf("RESULT switch go n/a not-applicable: Go exposes no raw context switch (see yield)\n")
	case "yield":
		fmt.Printf("RESULT yield go %.2f %s\n", yieldPingPong(n), tail)
	case "spawn":
		fmt.Printf("RESULT spawn go %.2f %s\n", spawnChain(n), tail)
	case "spawn_wait":
		fmt.Printf("RESULT spawn_wait go %.2f %s\n", spawnWait(n), tail)
	case "chansync":
		fmt.Printf("RESULT chansync go %.2f %s\n", chanSync(n), tail)
	case "prodcons100":
		fmt.Printf("RESULT prodcons100 go %.2f %s\n", prodCons(n, 100), tail)
	case "threadring":
		ns, d, id := threadRing(n)
		if id != n%ring+1 {
			fmt.Printf("RESULT threadring go n/a wrong-winner id=%d expected=%d\n", id, n%ring+1)
			return
		}
		fmt.Printf("RESULT threadring go %.2f total_ms=%.1f id=%d %s\n", ns, float64(d.Microseconds())/1e3, id, tail)
	case "trace":
		r, off, on, stopMs, size := traceOverhead(n)
		if r == 0 {
			fmt.Printf("RESULT trace go n/a trace-start-failed\n")
			return
		}
		fmt.Printf("RESULT trace go %.2f unit=on/off off_ns=%.1f on_ns=%.1f stop_ms=%.1f file_mb=%.1f %s\n",
			r, off, on, stopMs, float64(size)/1e6, tail)
	case "select2":
		ns, na := select2(n)
		fmt.Printf("RESULT select2 go %.2f from_a=%d %s\n", ns, na, tail)
	case "rss":
		per, before, after, live := rss(n)
		fmt.Printf("RESULT rss go %.2f unit=bytes/goroutine rss_before_kb=%d rss_after_kb=%d num_goroutine=%d %s\n",
			per, before/1024, after/1024, live, tail)
	case "syscall":
		fmt.Printf("RESULT syscall go %.2f %s\n", syscallGetpid(n), tail)
	case "preempt":
		fmt.Printf("RESULT preempt go %.2f unit=ms_worst_lateness %s\n", preemptLateness(n), tail)
	case "blocking", "blocking_guarded":
		fmt.Printf("RESULT %s go %.2f unit=ms %s\n", w, blockingSleeps(n), tail)
	case "preempt_overhead":
		fmt.Printf("RESULT preempt_overhead go %.2f unit=ms %s\n", preemptOverhead(n), tail)
	case "idle":
		fmt.Printf("RESULT idle go %.2f unit=switches/s parked=%d %s\n", idle(n), n, tail)
	case "burst":
		pct, before, peak, at5, after := burst(n)
		fmt.Printf("RESULT burst go %.2f unit=percent_of_growth_kept_15s rss_before_mb=%d rss_peak_mb=%d rss_5s_mb=%d rss_15s_mb=%d %s\n",
			pct, before>>20, peak>>20, at5>>20, after>>20, tail)
	case "echo10k", "idleconn":
		v, extra, err := netWorkload(w, n)
		if os.Getenv(netClientEnv) != "" {
			if err != nil {
				fmt.Fprintln(os.Stderr, "client:", err)
				os.Exit(1)
			}
			return
		}
		if err != nil {
			fmt.Printf("RESULT %s go n/a %s\n", w, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		fmt.Printf("RESULT %s go %.2f %s %s\n", w, v, extra, tail)
	case "mutex_uncontended", "mutex", "mutex_slack", "mutex_work", "wg_uncontended", "wg_adddone":
		var ns float64
		var workers int
		switch w {
		case "mutex_uncontended":
			ns, workers = mutexUncontended(n)
		case "mutex":
			ns, workers = benchmarkMutex(n, false, false)
		case "mutex_slack":
			ns, workers = benchmarkMutex(n, true, false)
		case "mutex_work":
			ns, workers = benchmarkMutex(n, false, true)
		case "wg_uncontended":
			ns, workers = waitGroupUncontended(n)
		case "wg_adddone":
			ns, workers = waitGroupAddDone(n)
		}
		fmt.Printf("RESULT %s go %.2f workers=%d %s\n", w, ns, workers, tail)
	default:
		fmt.Fprintln(os.Stderr, "unknown workload", w)
		os.Exit(2)
	}
}
