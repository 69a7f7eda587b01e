//! Length-prefixed frames, the unit of the peer port's own protocols (relays and links): a u32 big-endian length,
//! then that many bytes (an encoded protobuf message).

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// Appends `body` as one frame.
pub(crate) fn put_frame(out: &mut Vec<u8>, body: &[u8]) {
    put_len(out, body.len());
    out.extend_from_slice(body);
}

/// Appends a frame header for a body of `len` bytes (the caller appends the body).
pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) {
    // Senders bound what they frame far below 4 GiB; the reading side checks its own limit.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

/// Reads one frame of at most `max` bytes. The body is one buffer, so messages decoded from it may share it
/// (prost `Bytes` fields) instead of copying.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(stream: &mut R, max: usize) -> io::Result<Bytes> {
    let len = body_len(stream.read_u32().await?, max)?;
    let mut body = BytesMut::zeroed(len);
    stream.read_exact(&mut body).await?;
    Ok(body.freeze())
}

/// [`read_frame`] for a stream that must never go quiet: fails with `TimedOut` once `silence` passes without a byte,
/// between frames or inside one. A large frame over a slow link takes as long as it takes while its bytes flow.
pub(crate) async fn read_frame_within<R: AsyncRead + Unpin>(
    stream: &mut R,
    max: usize,
    silence: Duration,
) -> io::Result<Bytes> {
    let mut header = [0u8; 4];
    fill(stream, &mut header, silence).await?;
    let len = body_len(u32::from_be_bytes(header), max)?;
    let mut body = BytesMut::zeroed(len);
    fill(stream, &mut body, silence).await?;
    Ok(body.freeze())
}

/// A frame header's length, refused beyond `max`: such a length cannot be trusted to find the next frame.
fn body_len(header: u32, max: usize) -> io::Result<usize> {
    let len = header as usize;
    if len > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte frame (at most {max})")));
    }
    Ok(len)
}

async fn fill<R: AsyncRead + Unpin>(stream: &mut R, buf: &mut [u8], silence: Duration) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match tokio::time::timeout(silence, stream.read(&mut buf[filled..])).await {
            Err(_) => {
                let why = format!("silent for {} ms", silence.as_millis());
                return Err(io::Error::new(io::ErrorKind::TimedOut, why));
            }
            Ok(Ok(0)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(n)) => filled += n,
            Ok(Err(e)) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_or_cut_ones_are_errors() {
        let mut out = Vec::new();
        put_frame(&mut out, b"hello");
        put_frame(&mut out, b"");
        let mut r = out.as_slice();
        assert_eq!(&read_frame(&mut r, 5).await.unwrap()[..], b"hello");
        assert!(read_frame(&mut r, 5).await.unwrap().is_empty());
        assert_eq!(read_frame(&mut r, 5).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let mut big = Vec::new();
        put_frame(&mut big, &[0u8; 6]);
        assert_eq!(read_frame(&mut big.as_slice(), 5).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
        let short = [0u8, 0, 0, 9, 1, 2];
        assert_eq!(read_frame(&mut &short[..], 64).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_is_measured_between_bytes_not_per_frame() {
        use tokio::io::AsyncWriteExt as _;
        let silence = Duration::from_millis(100);
        let (mut tx, mut rx) = tokio::io::duplex(64);
        let slow = tokio::spawn(async move {
            // A 6-byte frame, one byte every 60 ms: 420 ms in all, never 100 ms without a byte.
            let mut frame = Vec::new();
            put_frame(&mut frame, b"abcdef");
            for b in frame {
                tx.write_all(&[b]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            tx
        });
        assert_eq!(&read_frame_within(&mut rx, 64, silence).await.unwrap()[..], b"abcdef");
        let mut tx = slow.await.unwrap();
        // Half a header, then nothing.
        tx.write_all(&[0, 0]).await.unwrap();
        let e = read_frame_within(&mut rx, 64, silence).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(tx);
    }
}
