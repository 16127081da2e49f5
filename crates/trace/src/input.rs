//! Opening trace files: plain, gzip or zstd, recognised by their magic bytes (not the file name).

use crate::error::{Result, TraceError};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Compression of an input, detected from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Which compression `head` (the first bytes of a stream) starts with.
pub fn detect_compression(head: &[u8]) -> Compression {
    if head.starts_with(&GZIP_MAGIC) {
        Compression::Gzip
    } else if head.starts_with(&ZSTD_MAGIC) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

const BUF: usize = 1 << 20;

/// Open `path` (`-` is standard input) as a buffered, decompressed byte stream.
pub fn open_input(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let raw: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(File::open(path).map_err(|e| TraceError::io(path, e))?)
    };
    let mut r = BufReader::with_capacity(BUF, raw);
    let head = r.fill_buf().map_err(|e| TraceError::io(path, e))?;
    Ok(match detect_compression(head) {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            BUF,
            flate2::bufread::MultiGzDecoder::new(r),
        )),
        Compression::Zstd => Box::new(BufReader::with_capacity(
            BUF,
            zstd::stream::read::Decoder::with_buffer(r).map_err(|e| TraceError::io(path, e))?,
        )),
    })
}
