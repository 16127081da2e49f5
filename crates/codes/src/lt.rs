//! RobuSTore's improved LT code (RobuSTore thesis §5.2.3).
//!
//! An object of K source blocks is encoded into N coded blocks; coded block i is the XOR of the source
//! blocks it is joined to in a bipartite graph. Degrees follow the robust soliton distribution with
//! parameters C and δ. The four improvements of §5.2.3 are all here:
//!
//! 1. **Guaranteed decodability**: the graph is generated first, without touching data, and checked with
//!    the peeling decoder; if the N coded blocks could not rebuild the object, the graph is regenerated
//!    from the next seed. The seed that worked is part of the code's parameters.
//! 2. **Uniform coverage**: neighbours are drawn one by one from a random permutation of the source blocks,
//!    a new permutation starting when one is used up, so source degrees differ by at most one.
//! 3. **Lazy XOR**: the decoder keeps coded blocks untouched and XORs data only when a coded block has one
//!    unknown neighbour left, so every XOR it does produces a decoded block.
//! 4. **Register/cache-friendly XOR**: that block is produced in one pass over all of its sources with the
//!    multi-source SIMD XOR kernel (each byte of each source read once, the output written once).

use crate::kernels;
use crate::rateless::{Packet, RatelessCode, RatelessDecoder};
use crate::rng::Rng;
use crate::{CodeError, Result};

/// Parameters of an LT code.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LtParams {
    /// Source blocks.
    pub k: usize,
    /// Coded blocks generated (and guaranteed to decode the object).
    pub n: usize,
    /// Bytes per block.
    pub block_size: usize,
    /// Robust soliton C.
    pub c: f64,
    /// Robust soliton δ.
    pub delta: f64,
    /// Seed of the graph (the seed finally used may be larger: see `LtCode::seed`).
    pub seed: u64,
}

impl LtParams {
    /// RobuSTore's working point: C = 1, δ = 0.1 (§5.2.4).
    pub fn new(k: usize, n: usize, block_size: usize) -> LtParams {
        LtParams {
            k,
            n,
            block_size,
            c: 1.0,
            delta: 0.1,
            seed: 1,
        }
    }
}

/// Cumulative robust soliton distribution over degrees 1..=k (index d-1).
pub fn robust_soliton_cdf(k: usize, c: f64, delta: f64) -> Vec<f64> {
    let kf = k as f64;
    let r = (c * (kf / delta).ln() * kf.sqrt()).max(1.0);
    let spike = ((kf / r).floor() as usize).clamp(1, k);
    let mut p = vec![0.0f64; k];
    for d in 1..=k {
        let rho = if d == 1 {
            1.0 / kf
        } else {
            1.0 / (d as f64 * (d as f64 - 1.0))
        };
        let tau = if d < spike {
            r / (d as f64 * kf)
        } else if d == spike {
            r * (r / delta).ln() / kf
        } else {
            0.0
        };
        p[d - 1] = rho + tau.max(0.0);
    }
    let total: f64 = p.iter().sum();
    let mut acc = 0.0;
    for x in p.iter_mut() {
        acc += *x / total;
        *x = acc;
    }
    if let Some(last) = p.last_mut() {
        *last = 1.0;
    }
    p
}

/// The bipartite coding graph in compressed rows: coded block i joins `nbr[off[i]..off[i+1]]`.
/// [`LtCode::graph`] exposes it: an update regenerates only the coded blocks whose neighbours changed.
#[derive(Clone, Debug)]
pub struct Graph {
    k: usize,
    off: Vec<u32>,
    nbr: Vec<u32>,
}

impl Graph {
    /// Source blocks.
    pub fn k(&self) -> usize {
        self.k
    }

    fn generate(k: usize, n: usize, cdf: &[f64], seed: u64) -> Graph {
        let mut rng = Rng::new(seed);
        let mut perm: Vec<u32> = (0..k as u32).collect();
        rng.shuffle(&mut perm);
        let mut cursor = 0usize;
        let mut stamp = vec![u32::MAX; k];
        let mut off = Vec::with_capacity(n + 1);
        let mut nbr = Vec::new();
        off.push(0u32);
        for i in 0..n {
            let u = rng.next_f64();
            let d = cdf.partition_point(|&x| x < u) + 1;
            let d = d.min(k);
            let mut taken = 0;
            while taken < d {
                if cursor == k {
                    rng.shuffle(&mut perm);
                    cursor = 0;
                }
                // A block that straddles two permutations could meet a source twice: take the next
                // unused one from later in the permutation instead and leave the repeat for the next block,
                // so every source is still used exactly once per permutation.
                if stamp[perm[cursor] as usize] == i as u32 {
                    match (cursor + 1..k).find(|&j| stamp[perm[j] as usize] != i as u32) {
                        Some(j) => perm.swap(cursor, j),
                        None => {
                            // Every remaining source is already in this block: start a new permutation.
                            cursor = k;
                            continue;
                        }
                    }
                }
                let s = perm[cursor];
                cursor += 1;
                stamp[s as usize] = i as u32;
                nbr.push(s);
                taken += 1;
            }
            off.push(nbr.len() as u32);
        }
        Graph { k, off, nbr }
    }

    /// Coded blocks.
    pub fn n(&self) -> usize {
        self.off.len() - 1
    }

    /// The source blocks coded block `i` is the XOR of. Panics if `i >= n()`.
    pub fn neighbours(&self, i: usize) -> &[u32] {
        &self.nbr[self.off[i] as usize..self.off[i + 1] as usize]
    }

    /// Source -> coded blocks containing it, compressed rows.
    fn reverse(&self) -> (Vec<u32>, Vec<u32>) {
        let mut count = vec![0u32; self.k + 1];
        for &s in &self.nbr {
            count[s as usize + 1] += 1;
        }
        for i in 0..self.k {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut rev = vec![0u32; self.nbr.len()];
        for i in 0..self.n() {
            for &s in self.neighbours(i) {
                rev[fill[s as usize] as usize] = i as u32;
                fill[s as usize] += 1;
            }
        }
        (count, rev)
    }
}

/// Peeling state shared by the graph-only check and the data decoder.
struct Peeler {
    rev_off: Vec<u32>,
    rev: Vec<u32>,
    received: Vec<bool>,
    remaining: Vec<u32>,
    /// XOR of the ids of a coded block's still-unknown neighbours: the last one when `remaining == 1`.
    xor_ids: Vec<u32>,
    decoded: Vec<bool>,
    n_decoded: usize,
    ripple: Vec<u32>,
}

impl Peeler {
    fn new(g: &Graph) -> Peeler {
        let (rev_off, rev) = g.reverse();
        let n = g.n();
        Peeler {
            rev_off,
            rev,
            received: vec![false; n],
            remaining: vec![0; n],
            xor_ids: vec![0; n],
            decoded: vec![false; g.k],
            n_decoded: 0,
            ripple: Vec::new(),
        }
    }

    /// Take coded block `c`; `release(c, source)` is called for every source block that becomes known,
    /// with the coded block that yields it.
    fn receive(&mut self, g: &Graph, c: usize, release: &mut impl FnMut(usize, usize)) {
        if self.received[c] {
            return;
        }
        self.received[c] = true;
        let mut rem = 0;
        let mut x = 0;
        for &s in g.neighbours(c) {
            if !self.decoded[s as usize] {
                rem += 1;
                x ^= s;
            }
        }
        self.remaining[c] = rem;
        self.xor_ids[c] = x;
        if rem == 1 {
            self.ripple.push(c as u32);
        }
        while let Some(c) = self.ripple.pop() {
            let c = c as usize;
            if self.remaining[c] != 1 {
                continue;
            }
            let s = self.xor_ids[c] as usize;
            if self.decoded[s] {
                continue;
            }
            self.decoded[s] = true;
            self.n_decoded += 1;
            release(c, s);
            for &c2 in &self.rev[self.rev_off[s] as usize..self.rev_off[s + 1] as usize] {
                let c2 = c2 as usize;
                if self.received[c2] {
                    self.remaining[c2] -= 1;
                    self.xor_ids[c2] ^= s as u32;
                    if self.remaining[c2] == 1 {
                        self.ripple.push(c2 as u32);
                    }
                }
            }
        }
    }

    fn complete(&self) -> bool {
        self.n_decoded == self.decoded.len()
    }
}

/// An LT code with its checked graph.
#[derive(Clone, Debug)]
pub struct LtCode {
    params: LtParams,
    seed: u64,
    graph: Graph,
    /// Graphs generated before one decoded (1 when the first did).
    pub attempts: u32,
}

impl LtCode {
    pub fn new(params: LtParams) -> Result<LtCode> {
        let LtParams {
            k,
            n,
            block_size,
            c,
            delta,
            seed,
        } = params.clone();
        if k == 0
            || n < k
            || block_size == 0
            || k > u32::MAX as usize / 2
            || n > u32::MAX as usize / 2
        {
            return Err(CodeError::Params {
                code: "LT",
                got: format!("k={k}, n={n}, block={block_size}"),
                rule: "needs 1 <= k <= n < 2^31 and a non-empty block",
            });
        }
        if c <= 0.0 || !(delta > 0.0 && delta < 1.0) {
            return Err(CodeError::Params {
                code: "LT",
                got: format!("C={c}, δ={delta}"),
                rule: "needs C > 0 and 0 < δ < 1",
            });
        }
        let cdf = robust_soliton_cdf(k, c, delta);
        for attempt in 0..1000u64 {
            let s = seed.wrapping_add(attempt);
            let graph = Graph::generate(k, n, &cdf, s);
            let mut p = Peeler::new(&graph);
            for i in 0..n {
                p.receive(&graph, i, &mut |_, _| {});
                if p.complete() {
                    break;
                }
            }
            if p.complete() {
                return Ok(LtCode {
                    params,
                    seed: s,
                    graph,
                    attempts: attempt as u32 + 1,
                });
            }
        }
        Err(CodeError::Params {
            code: "LT",
            got: format!("k={k}, n={n}"),
            rule: "no decodable graph in 1000 tries: raise n or C",
        })
    }

    /// The graph seed in use (the configured one, or the next that yielded a decodable graph).
    pub fn seed(&self) -> u64 {
        self.seed
    }
    pub fn params(&self) -> &LtParams {
        &self.params
    }

    /// The checked coding graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Would the coded blocks `ids` decode the object? Peels the graph alone (no data); ids outside
    /// the graph and repeats add nothing.
    pub fn decodable(&self, ids: impl IntoIterator<Item = usize>) -> bool {
        let mut p = Peeler::new(&self.graph);
        for c in ids {
            if c < self.graph.n() {
                p.receive(&self.graph, c, &mut |_, _| {});
                if p.complete() {
                    return true;
                }
            }
        }
        p.complete()
    }

    /// Coded block `id` into `out` (`block_size` bytes) from the padded object (K x block size bytes):
    /// one multi-source XOR of its neighbours, so any block costs its degree in block reads.
    pub fn encode_block(&self, padded: &[u8], id: usize, out: &mut [u8]) -> Result<()> {
        let bs = self.params.block_size;
        if id >= self.graph.n() {
            return Err(CodeError::IndexOutOfRange {
                index: id,
                n: self.graph.n(),
            });
        }
        self.check_padded(padded)?;
        if out.len() != bs {
            return Err(CodeError::ShardSize {
                what: "output block",
                index: id,
                got: out.len(),
                want: bs,
            });
        }
        let mut scratch = Vec::new();
        let sources = self.graph.neighbours(id).iter().map(|&s| s as usize * bs);
        kernels::xor_gather(kernels::active(), out, padded, sources, &mut scratch);
        Ok(())
    }

    /// Reception overhead over `trials` random reception orders: for each, the number of coded blocks
    /// received before the object decoded, divided by K. Graph only (no data), so cheap.
    pub fn reception_overhead(&self, trials: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut order: Vec<usize> = (0..self.graph.n()).collect();
        (0..trials)
            .map(|_| {
                rng.shuffle(&mut order);
                let mut p = Peeler::new(&self.graph);
                let mut used = 0;
                for &c in &order {
                    used += 1;
                    p.receive(&self.graph, c, &mut |_, _| {});
                    if p.complete() {
                        break;
                    }
                }
                used as f64 / self.params.k as f64
            })
            .collect()
    }

    /// Encode coded blocks `0..count` into `out` (`count * block_size` bytes) from the padded object.
    ///
    /// Cache-blocked (improvement 4): the blocks are produced strip by strip, so every strip of every
    /// source block is read from cache rather than memory however many coded blocks use it.
    pub fn encode_into(&self, padded: &[u8], count: usize, out: &mut [u8]) -> Result<()> {
        let bs = self.params.block_size;
        if count > self.graph.n() {
            return Err(CodeError::TooManyPackets {
                asked: count,
                max: self.graph.n(),
            });
        }
        self.check_padded(padded)?;
        if out.len() != count * bs {
            return Err(CodeError::ShardSize {
                what: "output buffer",
                index: 0,
                got: out.len(),
                want: count * bs,
            });
        }
        let level = kernels::active();
        let strip = strip_len(bs, self.params.k + count);
        let mut scratch = Vec::new();
        let mut start = 0;
        while start < bs {
            let w = strip.min(bs - start);
            for (i, block) in out.chunks_exact_mut(bs).enumerate() {
                let sources = self
                    .graph
                    .neighbours(i)
                    .iter()
                    .map(|&s| s as usize * bs + start);
                kernels::xor_gather(
                    level,
                    &mut block[start..start + w],
                    padded,
                    sources,
                    &mut scratch,
                );
            }
            start += w;
        }
        Ok(())
    }

    fn object_len(&self) -> usize {
        self.params.k * self.params.block_size
    }

    fn check_padded(&self, padded: &[u8]) -> Result<()> {
        if padded.len() != self.object_len() {
            return Err(CodeError::ShardSize {
                what: "padded object",
                index: 0,
                got: padded.len(),
                want: self.object_len(),
            });
        }
        Ok(())
    }
}

impl RatelessCode for LtCode {
    fn name(&self) -> &'static str {
        "lt"
    }
    fn source_blocks(&self) -> usize {
        self.params.k
    }
    fn encode(&self, data: &[u8], count: usize) -> Result<Vec<Packet>> {
        if data.len() > self.object_len() {
            return Err(CodeError::ObjectTooLarge {
                got: data.len(),
                max: self.object_len(),
            });
        }
        if count > self.graph.n() {
            return Err(CodeError::TooManyPackets {
                asked: count,
                max: self.graph.n(),
            });
        }
        let padded_store;
        let padded: &[u8] = if data.len() == self.object_len() {
            data
        } else {
            let mut v = vec![0u8; self.object_len()];
            v[..data.len()].copy_from_slice(data);
            padded_store = v;
            &padded_store
        };
        let bs = self.params.block_size;
        let mut out = vec![0u8; count * bs];
        self.encode_into(padded, count, &mut out)?;
        Ok(out
            .chunks_exact(bs)
            .enumerate()
            .map(|(i, c)| Packet {
                id: i as u32,
                data: c.to_vec(),
            })
            .collect())
    }
    fn decoder(&self) -> Box<dyn RatelessDecoder> {
        Box::new(LtDecoder::new(self.clone()))
    }
}

/// Bytes per strip so that one strip of every block involved stays in a ~512 KiB cache budget.
fn strip_len(block: usize, blocks: usize) -> usize {
    let budget = 512 * 1024 / blocks.max(1);
    (budget / 64 * 64).clamp(64, block.max(64)).min(block)
}

/// Lazy-XOR LT decoder. Peeling runs on the graph as packets arrive and records which coded block
/// yields which source block; no data is touched until the object is decodable. Then the recorded
/// schedule runs once, strip by strip (cache-blocked), each decoded strip produced by one multi-source
/// XOR: every XOR it does yields decoded data.
pub struct LtDecoder {
    code: LtCode,
    peel: Peeler,
    coded: Vec<Option<Vec<u8>>>,
    schedule: Vec<(u32, u32)>,
    out: Vec<u8>,
    received: usize,
}

impl LtDecoder {
    pub fn new(code: LtCode) -> LtDecoder {
        let out = vec![0u8; code.object_len()];
        LtDecoder::with_output(code, out)
    }

    /// A decoder that writes into a caller-provided buffer (resized to K x block size), e.g. a
    /// reused read buffer.
    pub fn with_output(code: LtCode, mut out: Vec<u8>) -> LtDecoder {
        out.resize(code.object_len(), 0);
        let peel = Peeler::new(&code.graph);
        let n = code.graph.n();
        LtDecoder {
            peel,
            coded: vec![None; n],
            schedule: Vec::with_capacity(code.params.k),
            out,
            received: 0,
            code,
        }
    }

    /// Add a coded block, taking ownership of its bytes (no copy).
    pub fn push_block(&mut self, id: usize, data: Vec<u8>) -> Result<bool> {
        let n = self.code.graph.n();
        if id >= n {
            return Err(CodeError::IndexOutOfRange { index: id, n });
        }
        if data.len() != self.code.params.block_size {
            return Err(CodeError::ShardSize {
                what: "packet",
                index: id,
                got: data.len(),
                want: self.code.params.block_size,
            });
        }
        self.received += 1;
        if self.peel.complete() || self.coded[id].is_some() {
            return Ok(self.peel.complete());
        }
        self.coded[id] = Some(data);
        let schedule = &mut self.schedule;
        self.peel.receive(&self.code.graph, id, &mut |c, s| {
            schedule.push((c as u32, s as u32))
        });
        if self.peel.complete() {
            self.run_schedule();
        }
        Ok(self.peel.complete())
    }

    // Each step XORs a coded block's strip and the strips of already decoded blocks into the strip
    // of the block it yields, all but the coded one in `out`: `kernels::xor_block_strips` checks
    // the block numbers once per step (branch-free) and keeps the addresses in a reused scratch
    // vector, so a step neither allocates nor builds slices. Allocating a source list per step
    // measured 25-35% slower (`ecstack bench ec` LT rows, 128-byte strips); this checked step
    // measured 0-7% slower than the raw pointers it replaced (K = 1024, 4-64 KiB blocks).
    fn run_schedule(&mut self) {
        let bs = self.code.params.block_size;
        let graph = &self.code.graph;
        let level = kernels::active();
        let strip = strip_len(bs, self.code.params.k + self.received);
        let mut scratch: Vec<*const u8> = Vec::new();
        let mut start = 0;
        while start < bs {
            let w = strip.min(bs - start);
            for &(c, s) in &self.schedule {
                let cd = self.coded[c as usize]
                    .as_deref()
                    .expect("scheduled coded block was received");
                kernels::xor_block_strips(
                    level,
                    &mut self.out,
                    bs,
                    (start, w),
                    s as usize,
                    graph.neighbours(c as usize),
                    &cd[start..],
                    &mut scratch,
                );
            }
            start += w;
        }
        // The coded blocks are no longer needed.
        self.coded = Vec::new();
    }

    /// The edges the decode XORed (RobuSTore Fig 5-2's CPU cost measure).
    pub fn edges_used(&self) -> usize {
        self.schedule
            .iter()
            .map(|&(c, _)| self.code.graph.neighbours(c as usize).len())
            .sum()
    }
}

impl RatelessDecoder for LtDecoder {
    fn push(&mut self, packet: &Packet) -> Result<bool> {
        self.push_block(packet.id as usize, packet.data.clone())
    }
    fn is_complete(&self) -> bool {
        self.peel.complete()
    }
    fn received(&self) -> usize {
        self.received
    }
    fn finish(self: Box<Self>) -> Result<Vec<u8>> {
        if !self.peel.complete() {
            return Err(CodeError::Incomplete {
                code: "LT",
                decoded: self.peel.n_decoded,
                k: self.code.params.k,
                received: self.received,
            });
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_is_monotone_and_ends_at_one() {
        let cdf = robust_soliton_cdf(1024, 1.0, 0.1);
        assert!(cdf.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*cdf.last().unwrap(), 1.0);
        // K = 1024, C = 1, δ = 0.1: R = ln(10240)·32 ≈ 295, so the spike sits at K/R ≈ 3.47 → degree 3,
        // which then is the most likely degree; below it degree 2 beats degree 1 (ideal soliton 1/2 vs 1/K).
        let p1 = cdf[0];
        let p2 = cdf[1] - cdf[0];
        let p3 = cdf[2] - cdf[1];
        let p4 = cdf[3] - cdf[2];
        assert!(
            p2 > p1 && p3 > p2 && p3 > p4,
            "p1={p1} p2={p2} p3={p3} p4={p4}"
        );
    }

    #[test]
    fn coverage_is_uniform() {
        let code = LtCode::new(LtParams::new(256, 1024, 16)).unwrap();
        let mut deg = vec![0usize; 256];
        for &s in &code.graph.nbr {
            deg[s as usize] += 1;
        }
        let (mn, mx) = (deg.iter().min().unwrap(), deg.iter().max().unwrap());
        // Rolling permutations: every source is used once per permutation, so degrees differ by at most one.
        assert!(mx - mn <= 1, "source degrees range {mn}..{mx}");
    }

    #[test]
    fn every_encoded_set_decodes_all_blocks() {
        let code = LtCode::new(LtParams::new(64, 160, 8)).unwrap();
        let mut p = Peeler::new(&code.graph);
        for i in 0..160 {
            p.receive(&code.graph, i, &mut |_, _| {});
        }
        assert!(p.complete());
    }
}
