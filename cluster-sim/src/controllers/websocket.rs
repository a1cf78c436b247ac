//! The WebSocket echo of a simulated pod (RFC 6455): the handshake answer and, once the
//! connection is upgraded, a first text message naming the pod, then every data message
//! sent back as it came (pings answered, close echoed).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &str) -> String {
    use base64::Engine as _;
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Largest message payload echoed.
const MAX_PAYLOAD: u64 = 1 << 20;

/// The final-fragment bit of a frame's first byte.
const FIN: u8 = 0x80;
const TEXT: u8 = 0x1;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// Writes one unmasked frame (server to client) whose first byte is `fin_opcode` (the FIN
/// bit and the opcode).
async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    fin_opcode: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut head = vec![fin_opcode];
    match payload.len() {
        n if n < 126 => head.push(n as u8),
        n if n <= usize::from(u16::MAX) => {
            head.push(126);
            head.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            head.push(127);
            head.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    w.write_all(&head).await?;
    w.write_all(payload).await?;
    w.flush().await
}

/// Serves an upgraded connection: greets with `greeting`, then echoes until the client
/// closes or breaks the protocol.
pub(crate) async fn echo<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    greeting: &str,
) -> std::io::Result<()> {
    write_frame(&mut io, FIN | TEXT, greeting.as_bytes()).await?;
    loop {
        let mut head = [0u8; 2];
        io.read_exact(&mut head).await?;
        let (fin_opcode, len7) = (head[0], head[1]);
        let opcode = fin_opcode & 0x0F;
        // Client frames are masked (RFC 6455 §5.3).
        if head[1] & 0x80 == 0 {
            return Err(std::io::Error::other("unmasked client frame"));
        }
        let len = match len7 & 0x7F {
            126 => u64::from(io.read_u16().await?),
            127 => io.read_u64().await?,
            n => u64::from(n),
        };
        if len > MAX_PAYLOAD {
            return Err(std::io::Error::other("frame too large"));
        }
        let mut mask = [0u8; 4];
        io.read_exact(&mut mask).await?;
        let mut payload = vec![0u8; len as usize];
        io.read_exact(&mut payload).await?;
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        match opcode {
            CLOSE => {
                let _ = write_frame(&mut io, FIN | CLOSE, &payload).await;
                return Ok(());
            }
            PING => write_frame(&mut io, FIN | PONG, &payload).await?,
            PONG => {}
            // Data and continuation frames go back as they came, FIN included.
            _ => write_frame(&mut io, fin_opcode, &payload).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_of_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn greets_then_echoes_masked_messages_and_answers_pings() {
        let (mut client, server) = tokio::io::duplex(4096);
        let task = tokio::spawn(echo(server, "sim-1 shop/web-0"));
        let frame = |opcode: u8, payload: &[u8]| {
            let mask = [1u8, 2, 3, 4];
            let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
            f.extend_from_slice(&mask);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            f
        };
        let read = async |c: &mut tokio::io::DuplexStream| {
            let mut h = [0u8; 2];
            c.read_exact(&mut h).await.unwrap();
            let mut p = vec![0u8; usize::from(h[1])];
            c.read_exact(&mut p).await.unwrap();
            (h[0], p)
        };
        assert_eq!(
            read(&mut client).await,
            (0x81, b"sim-1 shop/web-0".to_vec())
        );
        client.write_all(&frame(TEXT, b"hello")).await.unwrap();
        assert_eq!(read(&mut client).await, (0x81, b"hello".to_vec()));
        client.write_all(&frame(PING, b"p")).await.unwrap();
        assert_eq!(read(&mut client).await, (0x8A, b"p".to_vec()));
        client.write_all(&frame(CLOSE, &[3, 232])).await.unwrap();
        assert_eq!(read(&mut client).await, (0x88, vec![3, 232]));
        task.await.unwrap().unwrap();
    }
}
