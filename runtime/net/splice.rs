//! The kernel-side paths of [`crate::io::copy`] into a socket, taken once
//! a read has filled its buffer (a bulk stream), Go's
//! `TCPConn.ReadFrom`: splice(2) through a pipe from a stream socket
//! (net/splice_linux.go, internal/poll/splice_linux.go) and sendfile(2)
//! from a file (net/sendfile_linux.go, internal/poll/sendfile_linux.go).
//! The bytes never enter user space, and each wait parks only the
//! goroutine, on the same poll descriptors `Read` and `Write` use.
//!
//! Go picks the path with a type switch on `io.Reader`; Rust's `copy` is
//! generic, so the types are compared with `typeid::of` (a `TypeId` that
//! ignores lifetimes, so `&'a TcpStream` matches too), and a match is
//! cast to the concrete type. Taken when the writer is a goro
//! `TcpStream` or `UnixStream` (owned or `&`) and the reader is one of
//! those, a `std::fs::File` (owned or `&`), or an `io::Take` around any of
//! them (Go's `io.LimitedReader`: the limit is honoured and lowered by the
//! bytes moved). Any other pair, or a kernel that refuses the pair before
//! a byte moves (EINVAL: e.g. a `File` that is a pipe), takes the
//! buffered loop.
//!
//! splice(2) and sendfile(2) into a socket raise SIGPIPE when the peer has
//! gone, with no MSG_NOSIGNAL to ask otherwise. So the paths are taken
//! only while SIGPIPE is ignored, as it is in every Rust program unless
//! the program changed it (one sigaction(2) query per `copy`); otherwise
//! `copy` keeps its promise of never raising SIGPIPE by taking the
//! buffered loop.

use super::fd::NetFd;
use super::{TcpStream, UnixStream};
use core::sync::atomic::{AtomicU64, Ordering};
use std::fs::File;
use std::io::{self, Take};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Most bytes asked of one splice or sendfile call: 4 MiB, Go's
/// maxSpliceSize and maxSendfileSize. A splice into the pipe moves at
/// most the pipe's [`PIPE_SIZE`].
const MAX_CALL: u64 = 4 << 20;

/// Capacity asked of each pipe: 1 MiB, the default pipe-max-size, which
/// an unprivileged process may ask. Go 1.19 keeps the 64 KiB default;
/// here that made a splice copy between loopback sockets slower than the
/// 32 KiB buffered loop (a splice pair per 64 KiB), while at 1 MiB it was
/// 12-20% faster (docs/BENCHMARKS.md, session 26). When the kernel
/// refuses (EPERM once the user's pipe-user-pages-soft is spent), the
/// buffered loop is used instead.
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Pipes kept for reuse (Go keeps them in a sync.Pool, emptied by its
/// GC): at most 8, two descriptors each, held for the process's life.
const POOL_MAX: usize = 8;

/// A socket that can take the kernel's copy: its poll state and its fd.
type Sock<'a> = (&'a NetFd, RawFd);

/// Where the bytes come from.
enum Src<'a> {
    Sock(Sock<'a>),
    File(RawFd),
}

/// Whether `T`, up to lifetimes, is `U`.
fn is<T: ?Sized, U: ?Sized>() -> bool {
    typeid::of::<T>() == typeid::of::<U>()
}

/// `w` as a socket the kernel can write into.
fn sink<W: ?Sized>(w: &W) -> Option<Sock<'_>> {
    let p = w as *const W;
    // SAFETY: for each cast, `is` proved W to be the target type up to
    // lifetimes; the only lifetime in these types is that of the `&`
    // around a stream, which outlives `w`'s borrow.
    unsafe {
        if is::<W, TcpStream>() {
            Some((*p.cast::<TcpStream>()).poll_fd())
        } else if is::<W, &TcpStream>() {
            Some((*p.cast::<&TcpStream>()).poll_fd())
        } else if is::<W, UnixStream>() {
            Some((*p.cast::<UnixStream>()).poll_fd())
        } else if is::<W, &UnixStream>() {
            Some((*p.cast::<&UnixStream>()).poll_fd())
        } else {
            None
        }
    }
}

/// `r` (not an `io::Take`) as a source the kernel can read from.
fn source<R: ?Sized>(r: &R) -> Option<Src<'_>> {
    let p = r as *const R;
    // SAFETY: as in `sink`.
    unsafe {
        if let Some(s) = sink(&*p) {
            Some(Src::Sock(s))
        } else if is::<R, File>() {
            Some(Src::File((*p.cast::<File>()).as_raw_fd()))
        } else if is::<R, &File>() {
            Some(Src::File((*p.cast::<&File>()).as_raw_fd()))
        } else {
            None
        }
    }
}

/// Copies `r` into `w` in the kernel if the pair allows it (module doc):
/// `None` if it does not, with nothing read or written; otherwise the
/// bytes moved and how it ended (`Ok` at end of file or at an `io::Take`'s
/// limit), as `copy` returns them.
pub(crate) fn copy<R: ?Sized, W: ?Sized>(r: &mut R, w: &W) -> Option<io::Result<u64>> {
    let dst = sink(w)?;
    if let Some(src) = source(r) {
        if !sigpipe_ignored() {
            return None;
        }
        let (n, res) = transfer(dst, src, u64::MAX)?;
        return Some(res.map(|()| n));
    }
    macro_rules! take {
        ($($t:ty),*) => {$(
            if is::<R, Take<$t>>() {
                // SAFETY: R is Take<$t> up to lifetimes (as in `sink`).
                let t = unsafe { &mut *(r as *mut R).cast::<Take<$t>>() };
                let limit = t.limit();
                if limit == 0 {
                    return Some(Ok(0));
                }
                let src = source(t.get_ref())?;
                if !sigpipe_ignored() {
                    return None;
                }
                let (n, res) = transfer(dst, src, limit)?;
                t.set_limit(limit - n);
                return Some(res.map(|()| n));
            }
        )*};
    }
    take!(TcpStream, &TcpStream, UnixStream, &UnixStream, File, &File);
    None
}

/// `copy` calls that moved their bytes in the kernel (test hook
/// `__private::kernel_copies`). Relaxed: a count, ordered by nothing.
pub(crate) static KERNEL_COPIES: AtomicU64 = AtomicU64::new(0);

/// Moves up to `limit` bytes (`u64::MAX`: to end of file) from `src` to
/// `dst`; `None` if the kernel refused the pair before moving a byte.
fn transfer(dst: Sock<'_>, src: Src<'_>, limit: u64) -> Option<(u64, io::Result<()>)> {
    let r = match src {
        Src::Sock(s) => splice(dst, s, limit),
        Src::File(f) => sendfile(dst, f, limit),
    };
    if r.is_some() {
        KERNEL_COPIES.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Go's poll.Splice: drain up to 4 MiB from `src` into a pipe (parking
/// until `src` is readable), pump it all into `dst` (parking until
/// writable), repeat until `src`'s end of file or `limit`. Bytes drained
/// into the pipe but not pumped when `dst` fails are lost with the pipe,
/// as in Go (the count says how many reached `dst`).
fn splice(dst: Sock<'_>, src: Sock<'_>, mut limit: u64) -> Option<(u64, io::Result<()>)> {
    let mut pipe = Pipe::get()?;
    let mut moved = 0u64;
    let res = loop {
        if limit == 0 {
            break Ok(());
        }
        let max = limit.min(MAX_CALL) as usize;
        let n = match src
            .0
            .read_io(|| splice_call(src.1, pipe.w.as_raw_fd(), max))
        {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if moved == 0 && e.raw_os_error() == Some(libc::EINVAL) => {
                pipe.put();
                return None;
            }
            Err(e) => break Err(e),
        };
        pipe.data = n;
        while pipe.data > 0 {
            match dst
                .0
                .write_io(|| splice_call(pipe.r.as_raw_fd(), dst.1, pipe.data))
            {
                Ok(0) => return Some((moved, Err(io::ErrorKind::WriteZero.into()))),
                Ok(m) => {
                    pipe.data -= m;
                    moved += m as u64;
                    limit -= m as u64;
                }
                Err(e) => return Some((moved, Err(e))),
            }
        }
    };
    pipe.put();
    Some((moved, res))
}

/// Go's poll.SendFile: sendfile(2) from `file`'s current offset (which it
/// advances) into `dst`, parking while `dst` is full, until end of file or
/// `limit`. A read from disk blocks the thread as `File::read` would.
fn sendfile(dst: Sock<'_>, file: RawFd, mut limit: u64) -> Option<(u64, io::Result<()>)> {
    let mut moved = 0u64;
    while limit > 0 {
        let max = limit.min(MAX_CALL) as usize;
        match dst.0.write_io(|| sendfile_call(file, dst.1, max)) {
            Ok(0) => break,
            Ok(m) => {
                moved += m as u64;
                limit -= m as u64;
            }
            Err(e) if moved == 0 && refused(&e) => return None,
            Err(e) => return Some((moved, Err(e))),
        }
    }
    Some((moved, Ok(())))
}

/// sendfile's ways of saying "not this pair" (Go's poll.SendFile falls
/// back on them while nothing was sent).
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// One non-blocking splice(2) of up to `len` bytes.
fn splice_call(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the call (borrowed by `copy`,
    // or owned by the pipe); null offsets are allowed for pipes and
    // sockets.
    cvt(unsafe {
        libc::splice(
            from,
            core::ptr::null_mut(),
            to,
            core::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    })
}

/// One sendfile(2) of up to `len` bytes from `file`'s offset, which it
/// advances.
fn sendfile_call(file: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the call (borrowed by `copy`);
    // a null offset asks the kernel to use and advance the file's own.
    cvt(unsafe { libc::sendfile(to, file, core::ptr::null_mut(), len) })
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(crate::os::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Whether SIGPIPE's disposition is SIG_IGN now (module doc).
fn sigpipe_ignored() -> bool {
    // SAFETY: sigaction with a null new action only reads the current
    // one into `old`, plain data for which all-zero is valid.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGPIPE, core::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// A non-blocking pipe for splice, and how many bytes sit in it.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    data: usize,
}

/// Pipes with nothing in them, for the next `splice`.
static POOL: crate::sync::Mutex<Vec<Pipe>> = crate::sync::Mutex::new(Vec::new());

impl Pipe {
    /// A pooled pipe or a new one of [`PIPE_SIZE`]; `None` if pipe2(2)
    /// fails (EMFILE: the caller then copies through a buffer, as Go
    /// does) or the pipe cannot be grown.
    fn get() -> Option<Pipe> {
        if let Some(p) = POOL.lock().pop() {
            return Some(p);
        }
        let mut fds = [0; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return None;
        }
        // SAFETY: pipe2 succeeded: both are fresh descriptors we own.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: w is an open pipe descriptor; F_SETPIPE_SZ takes an int.
        if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) } < 0 {
            return None;
        }
        Some(Pipe { r, w, data: 0 })
    }

    /// Returns the pipe to the pool, or closes it if bytes are stranded in
    /// it (Go's putPipe) or the pool is full.
    fn put(self) {
        if self.data == 0 {
            let mut pool = POOL.lock();
            if pool.len() < POOL_MAX {
                pool.push(self);
            }
        }
    }
}
