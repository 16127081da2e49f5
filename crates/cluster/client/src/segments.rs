//! How a file's bytes map onto its segments: every segment but the last holds `segment_bytes`; a byte
//! range of the file becomes one piece per segment it touches; [`ReadOrder`] picks which piece of a
//! read to fetch next. Pure arithmetic, no I/O.

use std::collections::BTreeMap;

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

/// The order in which a read fetches its pieces. A get writes its pieces in order, but may fetch them
/// out of order within a look-ahead of `lookahead` pieces from the first piece not yet written (so at
/// most `lookahead` pieces are held, in flight or waiting to be written). The first unwritten piece
/// always goes first; after it, the piece whose OSDs carry the least of this read's outstanding bytes:
/// a read's bytes leave through the segment's primary (the whole piece) and its other data holders
/// (about a k-th each, sent to the primary, CodFS §4.3), so fetching the next pieces in file order
/// queues a read behind whichever primaries those pieces happen to share while other OSDs' outbound
/// links idle.
#[derive(Debug, Clone)]
pub struct ReadOrder {
    /// Per piece: (primary, its bytes), then (data holder, its bytes) for each other data holder.
    costs: Vec<Vec<(u32, u64)>>,
    started: Vec<bool>,
    /// Bytes of started, unfinished pieces per OSD.
    outstanding: BTreeMap<u32, u64>,
    lookahead: usize,
}

impl ReadOrder {
    /// `costs[i]`: the OSDs that send piece i's bytes, the primary first, with the bytes each sends.
    pub fn new(costs: Vec<Vec<(u32, u64)>>, lookahead: usize) -> ReadOrder {
        let started = vec![false; costs.len()];
        ReadOrder {
            costs,
            started,
            outstanding: BTreeMap::new(),
            lookahead: lookahead.max(1),
        }
    }

    /// The per-OSD costs of a piece of `length` bytes of a segment whose primary is `primary` and whose
    /// other data chunks (indexes 1..k) are on `data_holders`.
    pub fn piece_cost(primary: u32, data_holders: &[u32], length: u64, k: u32) -> Vec<(u32, u64)> {
        let share = length.div_ceil(u64::from(k.max(1)));
        let mut v = vec![(primary, length)];
        v.extend(
            data_holders
                .iter()
                .filter(|&&o| o != primary)
                .map(|&o| (o, share)),
        );
        v
    }

    /// Marks and returns the piece to start next, given the first piece not yet written; `None` when
    /// every piece inside the look-ahead has been started.
    pub fn start_next(&mut self, first_unwritten: usize) -> Option<usize> {
        let end = first_unwritten
            .saturating_add(self.lookahead)
            .min(self.costs.len());
        let pick = if first_unwritten < end && !self.started[first_unwritten] {
            first_unwritten
        } else {
            (first_unwritten..end)
                .filter(|&i| !self.started[i])
                .min_by_key(|&i| {
                    let load = |osd: u32| self.outstanding.get(&osd).copied().unwrap_or(0);
                    let c = &self.costs[i];
                    let primary = c.first().map_or(0, |&(o, _)| load(o));
                    let others: u64 = c.iter().skip(1).map(|&(o, _)| load(o)).sum();
                    (primary, others, i)
                })?
        };
        self.started[pick] = true;
        for &(osd, bytes) in &self.costs[pick] {
            *self.outstanding.entry(osd).or_default() += bytes;
        }
        Some(pick)
    }

    /// A started piece has arrived.
    pub fn finished(&mut self, piece: usize) {
        assert!(
            self.started[piece],
            "piece {piece} finished but was never started"
        );
        for &(osd, bytes) in &self.costs[piece] {
            let o = self
                .outstanding
                .get_mut(&osd)
                .expect("a started piece's OSDs are counted");
            *o = o
                .checked_sub(bytes)
                .expect("outstanding bytes never go below zero");
        }
    }
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

    /// Pieces of a read over 4 OSDs whose next pieces in file order share one primary: the order
    /// starts the head first, then spreads over the other primaries before coming back.
    #[test]
    fn read_order_spreads_primaries() {
        let primaries = [0u32, 0, 0, 1, 2, 3, 0, 1];
        let costs = primaries
            .iter()
            .map(|&p| ReadOrder::piece_cost(p, &[], 100, 4))
            .collect();
        let mut o = ReadOrder::new(costs, 8);
        let first: Vec<usize> = (0..4).map(|_| o.start_next(0).unwrap()).collect();
        assert_eq!(first, vec![0, 3, 4, 5]);
        o.finished(0);
        // Piece 1 is now the head: it goes first whatever its primary carries.
        assert_eq!(o.start_next(1), Some(1));
    }

    /// Whatever finishes when, every piece is started exactly once, never outside the look-ahead, the
    /// head first when it is not started, and the outstanding bytes return to zero (a model run over
    /// random costs and completion orders).
    #[test]
    fn read_order_starts_each_piece_once_within_the_lookahead() {
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let count = 1 + rng.below(40) as usize;
            let lookahead = 1 + rng.below(10) as usize;
            let window = 1 + rng.below(lookahead as u64) as usize;
            let costs: Vec<Vec<(u32, u64)>> = (0..count)
                .map(|_| {
                    let p = rng.below(6) as u32;
                    let holders: Vec<u32> = (0..3).map(|_| rng.below(6) as u32).collect();
                    ReadOrder::piece_cost(p, &holders, 1 + rng.below(1000), 4)
                })
                .collect();
            let mut o = ReadOrder::new(costs, lookahead);
            let mut started = vec![false; count];
            let mut done = vec![false; count];
            let mut in_flight: Vec<usize> = Vec::new();
            let mut head = 0;
            while head < count {
                while in_flight.len() < window {
                    let head_started = started[head];
                    let Some(i) = o.start_next(head) else { break };
                    assert!(!started[i], "piece {i} started twice");
                    assert!(
                        i >= head && i < head + lookahead,
                        "piece {i} outside the look-ahead"
                    );
                    if !head_started {
                        assert_eq!(i, head, "the head goes first");
                    }
                    started[i] = true;
                    in_flight.push(i);
                }
                assert!(!in_flight.is_empty(), "no progress at head {head}");
                let j = in_flight.swap_remove(rng.below(in_flight.len() as u64) as usize);
                o.finished(j);
                done[j] = true;
                while head < count && done[head] {
                    head += 1;
                }
            }
            assert!(o.outstanding.values().all(|&b| b == 0));
            assert!(started.iter().all(|&s| s));
        }
    }
}
