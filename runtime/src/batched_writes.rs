//! Sends what a connection's writers produce within one scheduler turn as one write.
//!
//! Over HTTP/2 every request or watch is a stream, and each stream's task queues its frames
//! for the connection's task, which flushes whatever it finds. So one turn's worth of work
//! often left as several TLS records in several `writev` calls, each a wake-up and a read
//! for the peer:
//! - hyper opens a client request in two steps: the request's task queues the HEADERS
//!   frame, then waits for the connection task to open the stream and grant it send
//!   capacity before it queues the body's DATA frame; the connection task flushed the
//!   HEADERS in between, so every write with a body went out in two sends;
//! - a server answers a write, and the watch events that write caused go out on the same
//!   connection a moment later, from other tasks.
//!
//! Under a TLS stream, [`BatchedWrites`] keeps what is written and, on the first flush that
//! finds bytes waiting, gives the turn back once (waking itself) before sending: the tasks
//! already woken (the body's, the watches') run in between and what they queue leaves in
//! the same send. A second flush sends at once, so nothing waits longer than the tasks
//! already queued on the worker.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Past this many waiting bytes a write sends them first (and waits on the socket when it
/// is full), so a busy connection still pushes back on its writers.
const MAX_WAITING: usize = 64 * 1024;
/// The room an idle connection keeps for its next batch: a connection lives long, and one
/// burst (a large LIST answered) should not hold its buffer's size for good.
const KEPT: usize = 16 * 1024;

/// A byte stream whose writes wait for the next flush, which waits one turn; see the
/// module documentation.
pub struct BatchedWrites<T> {
    io: T,
    waiting: Vec<u8>,
    /// A flush found bytes waiting and gave its turn back; the next flush sends them.
    yielded: bool,
}

impl<T> BatchedWrites<T> {
    /// Batches the writes to `io`.
    pub fn new(io: T) -> Self {
        BatchedWrites {
            io,
            waiting: Vec::new(),
            yielded: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> BatchedWrites<T> {
    /// Writes out every waiting byte.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut sent = 0;
        let result = loop {
            if sent == self.waiting.len() {
                break Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.waiting[sent..]) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => sent += n,
                Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                Poll::Pending => break Poll::Pending,
            }
        };
        if sent == self.waiting.len() && self.waiting.capacity() > KEPT {
            self.waiting = Vec::new();
        } else {
            self.waiting.drain(..sent);
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for BatchedWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.waiting.len() >= MAX_WAITING {
            ready!(self.poll_send(cx))?;
        }
        // Up to the cap (the first buffer whatever its size): the caller writes the rest
        // next, after the send above.
        let mut n = 0;
        for b in bufs {
            if n > 0 && self.waiting.len() + b.len() > MAX_WAITING {
                break;
            }
            self.waiting.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.waiting.is_empty() {
            if !self.yielded {
                self.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(self.poll_send(cx))?;
        }
        self.yielded = false;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for BatchedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Wake, Waker};
    use tokio::io::AsyncWriteExt as _;

    /// Records every write it is given as one entry.
    #[derive(Clone, Default)]
    struct Recorder {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.lock().unwrap().push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Counts how often it is woken.
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref()
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn writes_between_two_flushes_leave_as_one() {
        let rec = Recorder::default();
        let mut io = BatchedWrites::new(rec.clone());
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut io = Pin::new(&mut io);
        assert!(matches!(
            io.as_mut().poll_write(&mut cx, b"HEADERS"),
            Poll::Ready(Ok(7))
        ));
        // The first flush gives the turn back and sends nothing...
        assert!(io.as_mut().poll_flush(&mut cx).is_pending());
        assert!(rec.writes.lock().unwrap().is_empty());
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "it asks to be polled again"
        );
        // ...so what the other task writes meanwhile goes out with it.
        let bufs = [IoSlice::new(b"DA"), IoSlice::new(b"TA")];
        assert!(matches!(
            io.as_mut().poll_write_vectored(&mut cx, &bufs),
            Poll::Ready(Ok(4))
        ));
        assert!(io.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(*rec.writes.lock().unwrap(), vec![b"HEADERSDATA".to_vec()]);
        // Nothing waiting: a flush is immediate.
        assert!(io.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(rec.writes.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_flush_sends_everything_and_shutdown_too() {
        let rec = Recorder::default();
        let mut io = BatchedWrites::new(rec.clone());
        io.write_all(b"one").await.unwrap();
        io.flush().await.unwrap();
        io.write_all(b"two").await.unwrap();
        io.shutdown().await.unwrap();
        assert_eq!(
            *rec.writes.lock().unwrap(),
            vec![b"one".to_vec(), b"two".to_vec()]
        );
    }

    #[tokio::test]
    async fn a_long_run_of_writes_is_sent_before_it_grows_past_the_cap() {
        let rec = Recorder::default();
        let mut io = BatchedWrites::new(rec.clone());
        let chunk = vec![7u8; 16 * 1024];
        for _ in 0..5 {
            io.write_all(&chunk).await.unwrap();
        }
        // The fifth write found 64 KiB waiting and sent them first.
        let sent: usize = rec.writes.lock().unwrap().iter().map(Vec::len).sum();
        assert_eq!(sent, 64 * 1024);
        io.flush().await.unwrap();
        let sent: usize = rec.writes.lock().unwrap().iter().map(Vec::len).sum();
        assert_eq!(sent, 80 * 1024);
        // Sent out, the burst's 64 KiB buffer was let go of: what is kept is the room of
        // the last, smaller batch.
        assert!(io.waiting.capacity() <= KEPT, "{}", io.waiting.capacity());
    }

    #[test]
    fn a_vectored_write_takes_buffers_up_to_the_cap() {
        let rec = Recorder::default();
        let mut io = BatchedWrites::new(rec.clone());
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes);
        let mut cx = Context::from_waker(&waker);
        let chunk = vec![1u8; 16 * 1024];
        let bufs: Vec<IoSlice<'_>> = (0..6).map(|_| IoSlice::new(&chunk)).collect();
        let mut io = Pin::new(&mut io);
        // Four of the six fit under 64 KiB; the caller writes the rest again.
        assert!(matches!(
            io.as_mut().poll_write_vectored(&mut cx, &bufs),
            Poll::Ready(Ok(n)) if n == 64 * 1024
        ));
        assert!(rec.writes.lock().unwrap().is_empty());
        // The next write sends those first, then takes what is left.
        assert!(matches!(
            io.as_mut().poll_write_vectored(&mut cx, &bufs[4..]),
            Poll::Ready(Ok(n)) if n == 32 * 1024
        ));
        assert_eq!(rec.writes.lock().unwrap().len(), 1);
        // A single buffer larger than the cap is taken whole.
        let big = vec![2u8; 100 * 1024];
        let mut io2 = BatchedWrites::new(Recorder::default());
        assert!(matches!(
            Pin::new(&mut io2).poll_write_vectored(&mut cx, &[IoSlice::new(&big)]),
            Poll::Ready(Ok(n)) if n == 100 * 1024
        ));
    }
}
