//! How a file's bytes map onto its segments: every segment but the last holds `segment_bytes`; a byte
//! range of the file becomes one piece per segment it touches. Pure arithmetic, no I/O.

/// One piece of a file range that falls inside one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Position of the segment in its file.
    pub segment: usize,
    /// Offset inside the segment.
    pub offset: u64,
    pub length: u64,
    /// Offset of the piece inside the caller's range (0 for the first piece).
    pub at: u64,
}

/// The lengths of the segments of a file of `size` bytes (the last one may be short; none for 0).
pub fn segment_lengths(size: u64, segment_bytes: u64) -> Vec<u64> {
    assert!(
        segment_bytes > 0,
        "segment_bytes is validated by the config"
    );
    let full = size / segment_bytes;
    let mut v = vec![segment_bytes; full as usize];
    if size % segment_bytes != 0 {
        v.push(size % segment_bytes);
    }
    v
}

/// Splits the range `offset .. offset + length` of a file into one piece per segment. The caller has
/// checked that the range lies inside the file.
pub fn split_range(offset: u64, length: u64, segment_bytes: u64) -> Vec<Piece> {
    assert!(
        segment_bytes > 0,
        "segment_bytes is validated by the config"
    );
    let mut pieces = Vec::new();
    let end = offset + length;
    let mut pos = offset;
    while pos < end {
        let segment = pos / segment_bytes;
        let inside = pos % segment_bytes;
        let take = (segment_bytes - inside).min(end - pos);
        pieces.push(Piece {
            segment: segment as usize,
            offset: inside,
            length: take,
            at: pos - offset,
        });
        pos += take;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_base::Rng;

    #[test]
    fn lengths_cover_the_file() {
        assert!(segment_lengths(0, 10).is_empty());
        assert_eq!(segment_lengths(10, 10), vec![10]);
        assert_eq!(segment_lengths(25, 10), vec![10, 10, 5]);
        assert_eq!(segment_lengths(9, 10), vec![9]);
    }

    /// Every byte of a random range lands in exactly one piece, at the position a byte-by-byte walk
    /// says (the walk is the independent model).
    #[test]
    fn pieces_match_a_byte_walk() {
        let mut rng = Rng::new(12);
        for _ in 0..2000 {
            let seg = 1 + rng.below(50);
            let offset = rng.below(500);
            let length = rng.below(300);
            let pieces = split_range(offset, length, seg);
            let mut walked = Vec::new();
            for p in &pieces {
                assert!(p.length > 0 && p.offset + p.length <= seg);
                for i in 0..p.length {
                    walked.push((p.at + i, p.segment as u64 * seg + p.offset + i));
                }
            }
            let want: Vec<(u64, u64)> = (0..length).map(|i| (i, offset + i)).collect();
            assert_eq!(walked, want, "seg {seg} offset {offset} length {length}");
        }
    }
}
