//! The chunked transfer coding, followed byte by byte through any split of the input: where
//! a chunked body (chunks, last chunk, trailers) ends, so it can be relayed as it came and
//! the connection's next message found, and what its payload is, for HTTP/1.0 clients.

/// Longest chunk-size line (size and extensions).
const MAX_CHUNK_LINE: usize = 4096;
/// Most trailer bytes after the last chunk.
const MAX_TRAILERS: usize = 64 * 1024;

/// A malformed chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body")]
pub struct ChunkError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    /// Whitespace or extensions after the size, up to CR.
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// Start of a trailer line, or of the final CRLF.
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

/// Follows a chunked body through any split of its bytes.
#[derive(Clone, Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    size: u64,
    digits: usize,
    line: usize,
    trailers: usize,
}

impl Chunked {
    /// Whether the whole body (last chunk, trailers, final CRLF) went by.
    pub fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Scans `input`, handing each piece of chunk payload to `data`; returns how many bytes
    /// belong to the body (all of `input` unless the body ends inside it).
    pub fn feed(&mut self, input: &[u8], mut data: impl FnMut(&[u8])) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                ChunkState::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let d = (b as char).to_digit(16).unwrap_or(0);
                        if self.size > u64::MAX >> 4 {
                            return Err(ChunkError);
                        }
                        self.size = self.size << 4 | u64::from(d);
                        self.digits += 1;
                    }
                    b'\r' if self.digits > 0 => self.state = ChunkState::SizeLf,
                    b';' | b' ' | b'\t' if self.digits > 0 => {
                        self.state = ChunkState::Ext;
                        self.line = 0;
                    }
                    _ => return Err(ChunkError),
                },
                ChunkState::Ext => match b {
                    b'\r' => self.state = ChunkState::SizeLf,
                    b'\n' => return Err(ChunkError),
                    _ => {
                        self.line += 1;
                        if self.line > MAX_CHUNK_LINE {
                            return Err(ChunkError);
                        }
                    }
                },
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = if self.size == 0 {
                        ChunkState::TrailerStart
                    } else {
                        ChunkState::Data
                    };
                }
                ChunkState::Data => {
                    let n = (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    data(&input[i..i + n]);
                    self.size -= n as u64;
                    i += n;
                    if self.size == 0 {
                        self.state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::DataCr if b == b'\r' => self.state = ChunkState::DataLf,
                ChunkState::DataLf if b == b'\n' => {
                    self.state = ChunkState::Size;
                    self.digits = 0;
                }
                ChunkState::DataCr | ChunkState::DataLf => return Err(ChunkError),
                ChunkState::TrailerStart => {
                    self.state = if b == b'\r' {
                        ChunkState::EndLf
                    } else {
                        ChunkState::Trailer
                    };
                    self.count_trailer()?;
                }
                ChunkState::Trailer => {
                    if b == b'\r' {
                        self.state = ChunkState::TrailerLf;
                    }
                    self.count_trailer()?;
                }
                ChunkState::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = ChunkState::TrailerStart;
                }
                ChunkState::EndLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = ChunkState::Done;
                    return Ok(i + 1);
                }
                ChunkState::Done => return Ok(i),
            }
            i += 1;
        }
        Ok(i)
    }

    fn count_trailer(&mut self) -> Result<(), ChunkError> {
        self.trailers += 1;
        if self.trailers > MAX_TRAILERS {
            return Err(ChunkError);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] =
        b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: 1\r\nX-B: 2\r\n\r\nNEXT";

    /// Feeds `input` in pieces of `step` bytes; returns payload and body length.
    fn scan(input: &[u8], step: usize) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut c = Chunked::default();
        let mut payload = Vec::new();
        let mut used = 0;
        for piece in input.chunks(step) {
            let n = c.feed(piece, |d| payload.extend_from_slice(d))?;
            used += n;
            if c.done() {
                assert!(n <= piece.len());
                return Ok((payload, used));
            }
            assert_eq!(n, piece.len(), "an unfinished body takes all it is given");
        }
        Err(ChunkError)
    }

    #[test]
    fn chunked_bodies_end_in_the_right_place_whatever_the_split() {
        let end = BODY.len() - "NEXT".len();
        for step in 1..=BODY.len() {
            let (payload, used) = scan(BODY, step).unwrap();
            assert_eq!(payload, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            assert_eq!(
                used, end,
                "step {step}: trailers included, next message left"
            );
        }
        let (payload, used) = scan(b"0\r\n\r\n", 1).unwrap();
        assert!(payload.is_empty());
        assert_eq!(used, 5);
    }

    #[test]
    fn malformed_chunked_bodies() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloX",
            b"5\nhello\r\n",
            b"5\r\nhello\r\n0\r\nX: 1\rY",
            b"11111111111111111\r\n",
        ] {
            let mut c = Chunked::default();
            assert_eq!(
                c.feed(bad, |_| {}),
                Err(ChunkError),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long_ext = format!("1;{}\r\n", "e".repeat(5000));
        assert_eq!(
            Chunked::default().feed(long_ext.as_bytes(), |_| {}),
            Err(ChunkError)
        );
        let many_trailers = format!("0\r\n{}", "x: y\r\n".repeat(20_000));
        assert_eq!(
            Chunked::default().feed(many_trailers.as_bytes(), |_| {}),
            Err(ChunkError)
        );
    }
}
