// Network workloads of the Go side (issue 8): echo10k and idleconn. The
// goro rows are benches/peers/src/goro_net.rs; the shapes are the same line
// for line.
//
// Each run is two processes of this binary: the server (the measured
// process for idleconn) and a client child started with
// PEERS_NET_CLIENT=ADDR. Two processes because 10,000 connections need
// 20,000 fds in one, and RLIMIT_NOFILE's hard limit is often exactly that.

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const netClientEnv = "PEERS_NET_CLIENT"

// netConns: NET_CONNS, default 10,000 (read by the Rust side too).
func netConns() int {
	if v, err := strconv.Atoi(strings.ReplaceAll(os.Getenv("NET_CONNS"), "_", "")); err == nil {
		return v
	}
	return 10000
}

// raiseNofile sets RLIMIT_NOFILE's soft limit to the hard limit (Go 1.19's
// os package does this at startup already; explicit for symmetry).
func raiseNofile() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		r.Cur = r.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}

// vmStatusKiB: a field of /proc/self/status in KiB (VmRSS, VmPTE).
func vmStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, field+":") {
			fields := strings.Fields(line[len(field)+1:])
			kb, _ := strconv.ParseInt(fields[0], 10, 64)
			return kb
		}
	}
	return 0
}

// echoMsg: the 32-byte message of round trip k on connection i (the same
// xorshift as echo_msg in benches/peers/src/common.rs).
func echoMsg(i int, k uint64) [32]byte {
	var m [32]byte
	x := uint64(i+1)*0x9E3779B97F4A7C15 ^ k
	for j := range m {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		m[j] = byte(x)
	}
	return m
}

func clientCmd(w string, addr string, n int) *exec.Cmd {
	c := exec.Command(os.Args[0], w, strconv.Itoa(n))
	c.Env = append(os.Environ(), netClientEnv+"="+addr)
	c.Stderr = os.Stderr
	return c
}

// netWorkload runs echo10k or idleconn (server, or client child) and
// returns the RESULT line's value and extras.
func netWorkload(w string, n int) (float64, string, error) {
	raiseNofile()
	if addr := os.Getenv(netClientEnv); addr != "" {
		if w == "echo10k" {
			return 0, "", echoClient(addr, n)
		}
		return 0, "", idleClient(addr, n)
	}
	if w == "echo10k" {
		return echoServer(n)
	}
	return idleServer(n)
}

// echoServer: one goroutine per connection copying it to itself with the
// generic path of io.Copy (read into a 32 KiB buffer, write it back; the
// splice shortcut of io.Copy(c, c) is not taken, as goro::io::copy has
// none). The client child's figure, round trips/s, is the value.
func echoServer(k int) (float64, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, "", err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				continue
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 32*1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	out, err := clientCmd("echo10k", l.Addr().String(), k).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "CLIENT ") {
			f := strings.Fields(line)
			v, perr := strconv.ParseFloat(f[1], 64)
			if perr == nil {
				return v, strings.Join(f[2:], " "), nil
			}
		}
	}
	return 0, "", fmt.Errorf("client failed (%v): %s", err, strings.TrimSpace(string(out)))
}

// echoClient: netConns() goroutines connect (at most 512 at once), check
// one round trip and wait at a barrier; the clock runs from releasing them
// to the last finishing k round trips of 32 bytes, each checked.
func echoClient(addr string, k int) error {
	conns := netConns()
	var connected, finished sync.WaitGroup
	connecting := make(chan struct{}, 512)
	start := make(chan struct{})
	var bad int64
	connected.Add(conns)
	finished.Add(conns)
	tConnect := time.Now()
	for i := 0; i < conns; i++ {
		go func(i int) {
			connecting <- struct{}{}
			c, err := net.Dial("tcp", addr)
			<-connecting
			if err != nil {
				fmt.Fprintln(os.Stderr, "connect:", err)
				os.Exit(1)
			}
			var got [32]byte
			check := func(r uint64) {
				msg := echoMsg(i, r)
				if _, err := c.Write(msg[:]); err != nil {
					fmt.Fprintln(os.Stderr, "write:", err)
					os.Exit(1)
				}
				if _, err := io.ReadFull(c, got[:]); err != nil {
					fmt.Fprintln(os.Stderr, "read:", err)
					os.Exit(1)
				}
				if got != msg {
					atomic.AddInt64(&bad, 1)
				}
			}
			check(^uint64(0)) // warm-up, before the clock
			connected.Done()
			<-start
			for r := 0; r < k; r++ {
				check(uint64(r))
			}
			finished.Done()
		}(i)
	}
	connected.Wait()
	connectS := time.Since(tConnect).Seconds()
	t := time.Now()
	close(start)
	finished.Wait()
	d := time.Since(t).Seconds()
	if atomic.LoadInt64(&bad) != 0 {
		return fmt.Errorf("%d echoes differed", bad)
	}
	fmt.Printf("CLIENT %.0f unit=round_trips/s conns=%d k=%d secs=%.3f connect_secs=%.3f\n",
		float64(conns*k)/d, conns, k, d, connectS)
	return nil
}

// idleServer: n accepted connections, each held by a goroutine parked in a
// read of a 64-byte buffer. Value: (ΔVmRSS + ΔVmPTE) / n in KiB, measured in
// this process from after the listener is up to 50 ms after the n-th
// goroutine started.
func idleServer(n int) (float64, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, "", err
	}
	var started int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				continue
			}
			go func() {
				atomic.AddInt64(&started, 1)
				var buf [64]byte
				c.Read(buf[:]) // parks until the client exits
				c.Close()
			}()
		}
	}()
	time.Sleep(20 * time.Millisecond)
	rss0, pte0 := vmStatusKiB("VmRSS"), vmStatusKiB("VmPTE")
	cmd := clientCmd("idleconn", l.Addr().String(), n)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	t := time.Now()
	for atomic.LoadInt64(&started) < int64(n) {
		if time.Since(t) > 60*time.Second {
			cmd.Process.Kill()
			cmd.Wait()
			return 0, "", fmt.Errorf("only %d of %d connections after 60 s", atomic.LoadInt64(&started), n)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	rss1, pte1 := vmStatusKiB("VmRSS"), vmStatusKiB("VmPTE")
	stdin.Close() // the client exits on EOF
	cmd.Wait()
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) }
	runtime.KeepAlive(l)
	return per(rss1+pte1, rss0+pte0), fmt.Sprintf("unit=KiB/conn rss_kib_per_conn=%.2f pte_kib_per_conn=%.2f rss_before_kb=%d rss_after_kb=%d",
		per(rss1, rss0), per(pte1, pte0), rss0, rss1), nil
}

// idleClient: n plain connects in a row, then waits for stdin to close.
func idleClient(addr string, n int) error {
	held := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		held = append(held, c)
	}
	bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range held {
		c.Close()
	}
	return nil
}
