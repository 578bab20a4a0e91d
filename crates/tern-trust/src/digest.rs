//! SHA-256 digests as TUF writes them: lowercase hex.

use std::path::Path;

use crate::error::{Error, Result};

pub(crate) use tern_core::text::hex;

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    hex(d.as_ref())
}

/// Length and sha256 (hex) of a file, read in chunks.
pub(crate) fn file_digest(path: &Path) -> Result<(u64, String)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(Error::io("cannot open", path))?;
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut buf = vec![0; 1 << 16];
    let mut length = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(Error::io("cannot read", path))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
        length += n as u64;
    }
    Ok((length, hex(ctx.finish().as_ref())))
}
