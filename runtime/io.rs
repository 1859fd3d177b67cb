//! `goro::io`: I/O helpers in the shape of Go's io package, for code that
//! moves bytes between goroutine-friendly readers and writers (`goro::net`
//! sockets above all).

use std::io::{self, ErrorKind, Read, Write};

/// Size of the buffer [`copy`] moves data through: 32 KiB, Go's io.Copy
/// buffer (`io.copyBuffer` allocates `32 * 1024` bytes).
pub const COPY_BUF_SIZE: usize = 32 * 1024;

/// Copies everything `r` yields into `w` until `r` reports end of file
/// (a read of 0 bytes), and returns the number of bytes copied. Go's
/// `io.Copy(dst, src)` — note the argument order is std's
/// (`std::io::copy(reader, writer)`), the reverse of Go's.
///
/// Data moves through one heap buffer of [`COPY_BUF_SIZE`] (32 KiB, as in
/// Go) allocated per call: each successful read is passed to
/// `w.write_all` before the next read, so at most 32 KiB is in flight and
/// bytes reach `w` in order. Like Go's and std's, it does not flush `w` and
/// does not close or shut down either side (an echo server that wants the
/// peer to see EOF calls `shutdown(Shutdown::Write)` afterwards).
///
/// Once a read fills the whole buffer (a bulk stream), the rest moves in
/// the kernel where it can, as Go's `TCPConn.ReadFrom` moves it: by
/// splice(2) through a pooled 1 MiB pipe when `r` is a goro `TcpStream` or
/// `UnixStream`, by sendfile(2) from the file's current offset (which
/// advances) when `r` is a `std::fs::File`; owned or `&`, and also inside
/// an `io::Take` (Go's `io.LimitedReader`), whose limit is honoured and
/// lowered. The writer must be a goro `TcpStream` or `UnixStream` (owned
/// or `&`). The types are recognised exactly: a `BufReader` or a wrapper
/// of your own stays on the buffered loop. The kernel paths are skipped
/// while SIGPIPE is not ignored (they cannot ask for MSG_NOSIGNAL), and
/// given up for the buffered loop if the kernel refuses the pair before a
/// byte has moved (a `File` that is a pipe). Unlike Go, which splices
/// from the first byte, a copy of small messages (an echo, an interactive
/// proxy) never takes a pipe: idle and chatty connections cost no extra
/// descriptors.
///
/// # Blocking
/// Blocks until `r` is at end of file or an error occurs. When `r` and `w`
/// are goro sockets (`goro::net::TcpStream`, `&TcpStream`, `UnixStream`,
/// ...) called from a goroutine, every wait parks only the goroutine: the
/// OS thread runs other goroutines meanwhile (so `goro::go!(move || copy(&mut
/// &c, &mut &c))` is Go's `go io.Copy(c, c)`). With readers or writers
/// that block the thread (std sockets, files, pipes) it blocks the thread
/// and its P: wrap it in [`crate::blocking`] then. Outside a goroutine it
/// simply blocks the thread.
///
/// # Errors
/// The first error from either side, other than `ErrorKind::Interrupted`
/// (the read is retried; `write_all` retries interrupted writes). A write
/// of 0 bytes is `ErrorKind::WriteZero` (Go's `io.ErrShortWrite`). A
/// non-blocking std reader's or writer's `WouldBlock` is returned as an
/// error, not waited out. On error the count is not returned (as with
/// `std::io::copy`): every byte read before the failing call has been
/// handed to `w`, except that when `w` fails, an unknown prefix of the
/// last chunk (at most 32 KiB) may or may not have been written. A
/// caller that needs the exact count wraps `w` in a counting writer. On
/// the splice path, bytes drained into the pipe but not yet written when
/// `w` fails are lost with the pipe (at most 1 MiB; Go's splice loses
/// them too).
///
/// # Panics
/// Only if `r` or `w` panics, or if `r` reports reading more bytes than
/// the buffer holds (a broken `Read` impl).
pub fn copy<R: Read + ?Sized, W: Write + ?Sized>(r: &mut R, w: &mut W) -> io::Result<u64> {
    let mut buf = vec![0u8; COPY_BUF_SIZE];
    let mut written = 0u64;
    let mut kernel_tried = false;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(written),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..n])?;
        written += n as u64;
        // A full buffer: a bulk stream, worth a pipe's two descriptors.
        if n == buf.len() && !kernel_tried {
            kernel_tried = true;
            if let Some(res) = crate::net::splice::copy(r, w) {
                return res.map(|k| written + k);
            }
        }
    }
}
