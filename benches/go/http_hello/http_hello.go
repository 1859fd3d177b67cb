// Minimal HTTP/1.1 keep-alive server for benches/compare.sh http: the Go
// side of examples/http_hello.rs. net.Listener + one goroutine per
// connection + a fixed response; not net/http (which does far more work per
// request). Requests are delimited by "\r\n\r\n" (no bodies expected);
// pipelined requests are answered in order with one write per read.
//
// Usage: GOMAXPROCS=2 http_hello ADDR   (prints "listening on ADDR")
// Build: GO111MODULE=off go build -o http_hello http_hello.go
package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
)

var ok = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!")
var sep = []byte("\r\n\r\n")

func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	out := make([]byte, 0, 4096)
	n := 0
	for {
		if n == len(buf) {
			return // request head too large
		}
		m, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += m
		start := 0
		for {
			i := bytes.Index(buf[start:n], sep)
			if i < 0 {
				break
			}
			start += i + 4
			out = append(out, ok...)
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
		n = copy(buf, buf[start:n])
	}
}

func main() {
	addr := "127.0.0.1:8080"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go serve(c)
	}
}
