//! Sparse byte store for simulated devices that keep data: 64 KiB chunks allocated on first write,
//! missing chunks read as zeros. Lets a simulated 500 GB disk keep the few GB a test writes.

use std::collections::HashMap;

const CHUNK: u64 = 64 * 1024;

#[derive(Debug, Default)]
pub struct SparseData {
    chunks: HashMap<u64, Box<[u8]>>,
}

impl SparseData {
    pub fn new() -> Self {
        SparseData::default()
    }

    /// Bytes held in memory.
    pub fn resident_bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK
    }

    pub fn read(&self, buf: &mut [u8], offset: u64) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (c, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(buf.len() - done);
            match self.chunks.get(&c) {
                Some(ch) => buf[done..done + n].copy_from_slice(&ch[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    pub fn write(&mut self, buf: &[u8], offset: u64) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (c, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(buf.len() - done);
            let ch = self
                .chunks
                .entry(c)
                .or_insert_with(|| vec![0u8; CHUNK as usize].into_boxed_slice());
            ch[within..within + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
    }

    /// Zero `[offset, offset+len)`, freeing chunks it covers completely.
    pub fn zero(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let (c, within) = (pos / CHUNK, pos % CHUNK);
            let n = (CHUNK - within).min(end - pos);
            if n == CHUNK {
                self.chunks.remove(&c);
            } else if let Some(ch) = self.chunks.get_mut(&c) {
                ch[within as usize..(within + n) as usize].fill(0);
            }
            pos += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_roundtrip() {
        let mut s = SparseData::new();
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        s.write(&data, 12_345);
        let mut back = vec![0u8; data.len()];
        s.read(&mut back, 12_345);
        assert_eq!(back, data);
        s.zero(12_345, 200_000);
        s.read(&mut back, 12_345);
        assert!(back.iter().all(|&b| b == 0));
        assert!(s.resident_bytes() <= 2 * CHUNK);
    }
}
