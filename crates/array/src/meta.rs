//! Metadata (EPLOG §3.5): data-stripe and log-stripe metadata in in-memory hash maps, changed only
//! through [`Rec`] records (so replaying the records after a checkpoint rebuilds the same state), and
//! persisted on the metadata volume as two alternating full checkpoints plus an append-only
//! incremental area of checksummed frames.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use ecstack_device::BlockDevice;

use crate::format::{Dec, Enc, MetaLayout};
use crate::{ArrayError, Result};

const CP_MAGIC: &[u8; 8] = b"ECSTKCKP";
const CP_HEADER: usize = 48;
const FRAME_MAGIC: u32 = 0x4543_5246; // "FREC"
const FRAME_HEADER: usize = 36;

/// A member of a log stripe: a data chunk version written out of place on a main device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub dev: u16,
    pub slot: u64,
    pub stripe: u64,
    pub pos: u16,
}

/// Log stripe metadata: the slot its log chunks use on every log device, and its data chunks in code
/// order (log chunk i is parity i of a k'-of-(k'+m) code over the members, k' = members.len()).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStripe {
    pub off: u64,
    pub members: Vec<Member>,
}

/// Data stripe metadata (eplog): per data position the committed version (the one the parity chunks
/// reflect; None = never written, reads as zeros) and the latest version if updated since the last
/// parity commit, with the log stripe protecting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStripe {
    pub committed: Vec<Option<u64>>,
    pub latest: Vec<Option<(u64, u64)>>,
    /// Whether the parity chunks on the main array are valid for the committed versions.
    pub parity: bool,
}

impl DataStripe {
    pub fn new(k: usize) -> DataStripe {
        DataStripe {
            committed: vec![None; k],
            latest: vec![None; k],
            parity: false,
        }
    }
    pub fn pending(&self) -> bool {
        self.latest.iter().any(|l| l.is_some())
    }
}

/// One metadata change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    /// md/pl: stripe written for the first time (full-stripe write with parity).
    StripeWritten {
        stripe: u64,
    },
    /// eplog: a new stripe written whole with parity; every chunk at its home slot.
    FullStripe {
        stripe: u64,
    },
    /// eplog: a log stripe was written; each member becomes the latest version of its chunk.
    LogStripe {
        id: u64,
        off: u64,
        members: Vec<Member>,
    },
    /// pl: a log entry (per-stripe parity deltas) at log slot `off`.
    PlLog {
        stripe: u64,
        off: u64,
    },
    /// pl: a full-stripe write rewrote the parity; the stripe's log entries are obsolete.
    PlReset {
        stripe: u64,
    },
    /// A parity commit starts writing parity chunks.
    CommitBegin,
    /// A parity commit finished: latest versions become committed, logs are empty.
    CommitDone,
    DeviceFailed {
        dev: u16,
    },
    DeviceReplaced {
        dev: u16,
    },
    /// md/pl write-intent: region `region` (of [`REGION_STRIPES`] stripes) may have data and parity
    /// out of step; persisted before the first write into it.
    Dirty {
        region: u64,
    },
    /// md/pl: every region is consistent again (after a commit, a clean close or a resync).
    Clean,
    /// The stripe was discarded (TRIM): it reads as zeros and is written whole again next time.
    Discard {
        stripe: u64,
    },
}

/// Stripes per write-intent region (md/pl).
pub const REGION_STRIPES: u64 = 1024;

impl Rec {
    fn encode(&self, e: &mut Enc) {
        match self {
            Rec::StripeWritten { stripe } => {
                e.u8(1);
                e.u64(*stripe);
            }
            Rec::FullStripe { stripe } => {
                e.u8(2);
                e.u64(*stripe);
            }
            Rec::LogStripe { id, off, members } => {
                e.u8(3);
                e.u64(*id);
                e.u64(*off);
                e.u16(members.len() as u16);
                for m in members {
                    enc_member(e, m);
                }
            }
            Rec::PlLog { stripe, off } => {
                e.u8(4);
                e.u64(*stripe);
                e.u64(*off);
            }
            Rec::PlReset { stripe } => {
                e.u8(5);
                e.u64(*stripe);
            }
            Rec::CommitBegin => e.u8(6),
            Rec::CommitDone => e.u8(7),
            Rec::DeviceFailed { dev } => {
                e.u8(8);
                e.u16(*dev);
            }
            Rec::DeviceReplaced { dev } => {
                e.u8(9);
                e.u16(*dev);
            }
            Rec::Dirty { region } => {
                e.u8(10);
                e.u64(*region);
            }
            Rec::Clean => e.u8(11),
            Rec::Discard { stripe } => {
                e.u8(12);
                e.u64(*stripe);
            }
        }
    }

    fn decode(d: &mut Dec) -> Result<Rec> {
        Ok(match d.u8()? {
            1 => Rec::StripeWritten { stripe: d.u64()? },
            2 => Rec::FullStripe { stripe: d.u64()? },
            3 => {
                let id = d.u64()?;
                let off = d.u64()?;
                let n = d.u16()? as usize;
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    members.push(dec_member(d)?);
                }
                Rec::LogStripe { id, off, members }
            }
            4 => Rec::PlLog {
                stripe: d.u64()?,
                off: d.u64()?,
            },
            5 => Rec::PlReset { stripe: d.u64()? },
            6 => Rec::CommitBegin,
            7 => Rec::CommitDone,
            8 => Rec::DeviceFailed { dev: d.u16()? },
            9 => Rec::DeviceReplaced { dev: d.u16()? },
            10 => Rec::Dirty { region: d.u64()? },
            11 => Rec::Clean,
            12 => Rec::Discard { stripe: d.u64()? },
            t => return Err(ArrayError::Meta(format!("unknown record type {t}"))),
        })
    }
}

fn enc_member(e: &mut Enc, m: &Member) {
    e.u16(m.dev);
    e.u64(m.slot);
    e.u64(m.stripe);
    e.u16(m.pos);
}

fn dec_member(d: &mut Dec) -> Result<Member> {
    Ok(Member {
        dev: d.u16()?,
        slot: d.u64()?,
        stripe: d.u64()?,
        pos: d.u16()?,
    })
}

/// The whole metadata state.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaState {
    pub k: usize,
    pub failed: BTreeSet<u16>,
    /// md/pl: bitmap of stripes written at least once.
    pub written: Vec<u64>,
    /// eplog: data stripe metadata of every written stripe.
    pub stripes: HashMap<u64, DataStripe>,
    /// eplog: log stripes since the last parity commit.
    pub logs: HashMap<u64, LogStripe>,
    /// pl: per stripe, the log slots of its log entries since the last parity commit.
    pub pl_logs: HashMap<u64, Vec<u64>>,
    /// Next free slot on the log devices (append-only, reset by a parity commit).
    pub log_next: u64,
    pub next_log_id: u64,
    pub commit_in_progress: bool,
    /// md/pl write-intent regions that may hold stripes whose parity lags their data.
    pub dirty: BTreeSet<u64>,
}

impl MetaState {
    pub fn new(k: usize, stripes: u64) -> MetaState {
        MetaState {
            k,
            failed: BTreeSet::new(),
            written: vec![0; stripes.div_ceil(64) as usize],
            stripes: HashMap::new(),
            logs: HashMap::new(),
            pl_logs: HashMap::new(),
            log_next: 0,
            next_log_id: 0,
            commit_in_progress: false,
            dirty: BTreeSet::new(),
        }
    }

    pub fn is_written(&self, s: u64) -> bool {
        self.written
            .get((s / 64) as usize)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    fn set_written(&mut self, s: u64) {
        if let Some(w) = self.written.get_mut((s / 64) as usize) {
            *w |= 1 << (s % 64);
        }
    }

    /// Apply one record.
    pub fn apply(&mut self, r: &Rec) {
        match r {
            Rec::StripeWritten { stripe } => self.set_written(*stripe),
            Rec::FullStripe { stripe } => {
                let k = self.k;
                self.stripes.insert(
                    *stripe,
                    DataStripe {
                        committed: vec![Some(*stripe); k],
                        latest: vec![None; k],
                        parity: true,
                    },
                );
            }
            Rec::LogStripe { id, off, members } => {
                for m in members {
                    let k = self.k;
                    let ds = self
                        .stripes
                        .entry(m.stripe)
                        .or_insert_with(|| DataStripe::new(k));
                    if let Some(l) = ds.latest.get_mut(m.pos as usize) {
                        *l = Some((m.slot, *id));
                    }
                }
                self.logs.insert(
                    *id,
                    LogStripe {
                        off: *off,
                        members: members.clone(),
                    },
                );
                self.log_next = self.log_next.max(off + 1);
                self.next_log_id = self.next_log_id.max(id + 1);
            }
            Rec::PlLog { stripe, off } => {
                self.pl_logs.entry(*stripe).or_default().push(*off);
                self.log_next = self.log_next.max(off + 1);
            }
            Rec::PlReset { stripe } => {
                self.pl_logs.remove(stripe);
            }
            Rec::CommitBegin => self.commit_in_progress = true,
            Rec::CommitDone => {
                for ds in self.stripes.values_mut() {
                    for (c, l) in ds.committed.iter_mut().zip(ds.latest.iter_mut()) {
                        if let Some((slot, _)) = l.take() {
                            *c = Some(slot);
                        }
                    }
                    ds.parity = true;
                }
                self.logs.clear();
                self.pl_logs.clear();
                self.log_next = 0;
                self.commit_in_progress = false;
            }
            Rec::DeviceFailed { dev } => {
                self.failed.insert(*dev);
            }
            Rec::DeviceReplaced { dev } => {
                self.failed.remove(dev);
            }
            Rec::Dirty { region } => {
                self.dirty.insert(*region);
            }
            Rec::Clean => self.dirty.clear(),
            Rec::Discard { stripe } => {
                if let Some(w) = self.written.get_mut((stripe / 64) as usize) {
                    *w &= !(1 << (stripe % 64));
                }
                self.pl_logs.remove(stripe);
                self.stripes.remove(stripe);
            }
        }
    }

    /// Full checkpoint body.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u16(self.failed.len() as u16);
        for f in &self.failed {
            e.u16(*f);
        }
        e.u64(self.written.len() as u64);
        for w in &self.written {
            e.u64(*w);
        }
        let mut ids: Vec<&u64> = self.stripes.keys().collect();
        ids.sort_unstable();
        e.u64(ids.len() as u64);
        for id in ids {
            let ds = &self.stripes[id];
            e.u64(*id);
            e.u8(ds.parity as u8);
            for (c, l) in ds.committed.iter().zip(&ds.latest) {
                e.u8(c.is_some() as u8 | (l.is_some() as u8) << 1);
                if let Some(c) = c {
                    e.u64(*c);
                }
                if let Some((slot, log)) = l {
                    e.u64(*slot);
                    e.u64(*log);
                }
            }
        }
        let mut lids: Vec<&u64> = self.logs.keys().collect();
        lids.sort_unstable();
        e.u64(lids.len() as u64);
        for id in lids {
            let ls = &self.logs[id];
            e.u64(*id);
            e.u64(ls.off);
            e.u16(ls.members.len() as u16);
            for m in &ls.members {
                enc_member(&mut e, m);
            }
        }
        let mut pids: Vec<&u64> = self.pl_logs.keys().collect();
        pids.sort_unstable();
        e.u64(pids.len() as u64);
        for s in pids {
            let v = &self.pl_logs[s];
            e.u64(*s);
            e.u32(v.len() as u32);
            for o in v {
                e.u64(*o);
            }
        }
        e.u64(self.log_next);
        e.u64(self.next_log_id);
        e.u8(self.commit_in_progress as u8);
        e.u64(self.dirty.len() as u64);
        for r in &self.dirty {
            e.u64(*r);
        }
        e.0
    }

    pub fn decode(k: usize, stripes: u64, body: &[u8]) -> Result<MetaState> {
        let mut st = MetaState::new(k, stripes);
        let mut d = Dec::new(body);
        for _ in 0..d.u16()? {
            st.failed.insert(d.u16()?);
        }
        let nw = d.u64()? as usize;
        if nw != st.written.len() {
            return Err(ArrayError::Meta(format!(
                "checkpoint has a {nw}-word stripe bitmap, geometry needs {}",
                st.written.len()
            )));
        }
        for w in st.written.iter_mut() {
            *w = d.u64()?;
        }
        for _ in 0..d.u64()? {
            let id = d.u64()?;
            let mut ds = DataStripe::new(k);
            ds.parity = d.u8()? != 0;
            for p in 0..k {
                let f = d.u8()?;
                if f & 1 != 0 {
                    ds.committed[p] = Some(d.u64()?);
                }
                if f & 2 != 0 {
                    ds.latest[p] = Some((d.u64()?, d.u64()?));
                }
            }
            st.stripes.insert(id, ds);
        }
        for _ in 0..d.u64()? {
            let id = d.u64()?;
            let off = d.u64()?;
            let n = d.u16()? as usize;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                members.push(dec_member(&mut d)?);
            }
            st.logs.insert(id, LogStripe { off, members });
        }
        for _ in 0..d.u64()? {
            let s = d.u64()?;
            let n = d.u32()? as usize;
            let mut v = Vec::with_capacity(n.min(1 << 20));
            for _ in 0..n {
                v.push(d.u64()?);
            }
            st.pl_logs.insert(s, v);
        }
        st.log_next = d.u64()?;
        st.next_log_id = d.u64()?;
        st.commit_in_progress = d.u8()? != 0;
        if !d.done() {
            // Write-intent regions (absent in checkpoints written before they existed).
            for _ in 0..d.u64()? {
                st.dirty.insert(d.u64()?);
            }
        }
        if !d.done() {
            return Err(ArrayError::Meta("trailing bytes after checkpoint".into()));
        }
        Ok(st)
    }

    /// Largest checkpoint body a geometry can need (used to size the checkpoint areas).
    pub fn max_encoded(k: usize, n: usize, stripes: u64, slots: u64, log_slots: u64) -> u64 {
        let words = stripes.div_ceil(64);
        256 + 2 * 64
            + 8 * words
            + 8 * (stripes.div_ceil(REGION_STRIPES) + 1)
            + stripes * (9 + 25 * k as u64)
            + log_slots * 18
            + (n as u64) * slots * 20
            + log_slots * 20
    }
}

/// Bytes one frame of `recs` takes in the incremental area.
pub(crate) fn frame_len(recs: &[Rec]) -> u64 {
    let mut e = Enc::default();
    for r in recs {
        r.encode(&mut e);
    }
    (FRAME_HEADER + e.0.len()) as u64
}

/// The metadata volume's writer side: where the next frame goes and which checkpoint epoch is live.
#[derive(Debug)]
pub(crate) struct MetaVolume {
    pub dev: Arc<dyn BlockDevice>,
    pub layout: MetaLayout,
    pub salt: u64,
    pub epoch: u64,
    pub inc_pos: u64,
    pub seq: u64,
    pub frames: u64,
    pub checkpoints: u64,
}

impl MetaVolume {
    pub fn new(dev: Arc<dyn BlockDevice>, layout: MetaLayout, salt: u64) -> MetaVolume {
        MetaVolume {
            dev,
            layout,
            salt,
            epoch: 0,
            inc_pos: 0,
            seq: 0,
            frames: 0,
            checkpoints: 0,
        }
    }

    /// Whether a frame of `len` bytes still fits in the incremental area.
    pub fn fits(&self, len: u64) -> bool {
        self.inc_pos + len <= self.layout.inc_size
    }

    /// Write a full checkpoint of `body` at the next epoch into the other area, flush, and start a
    /// fresh incremental area.
    pub fn write_checkpoint(&mut self, body: &[u8]) -> Result<()> {
        let total = (CP_HEADER + body.len()) as u64;
        if total > self.layout.cp_size {
            return Err(ArrayError::Meta(format!(
                "checkpoint of {total} bytes exceeds its {} byte area",
                self.layout.cp_size
            )));
        }
        let epoch = self.epoch + 1;
        let mut h = vec![0u8; CP_HEADER];
        h[..8].copy_from_slice(CP_MAGIC);
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        h[12..20].copy_from_slice(&self.salt.to_le_bytes());
        h[20..28].copy_from_slice(&epoch.to_le_bytes());
        h[28..36].copy_from_slice(&(body.len() as u64).to_le_bytes());
        h[36..40].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
        let hc = crc32c::crc32c(&h[..40]);
        h[40..44].copy_from_slice(&hc.to_le_bytes());
        h.extend_from_slice(body);
        let off = self.layout.cp_off[(epoch % 2) as usize];
        self.dev.write_at(&h, off)?;
        self.dev.flush()?;
        self.epoch = epoch;
        self.inc_pos = 0;
        self.seq = 0;
        self.checkpoints += 1;
        Ok(())
    }

    /// Append one frame holding `recs` to the incremental area and flush.
    pub fn append(&mut self, recs: &[Rec]) -> Result<()> {
        let mut e = Enc::default();
        for r in recs {
            r.encode(&mut e);
        }
        let payload = e.0;
        let mut f = Vec::with_capacity(FRAME_HEADER + payload.len());
        f.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(&self.salt.to_le_bytes());
        f.extend_from_slice(&self.epoch.to_le_bytes());
        f.extend_from_slice(&self.seq.to_le_bytes());
        let mut c = crc32c::crc32c(&f[..32]);
        c = crc32c::crc32c_append(c, &payload);
        f.extend_from_slice(&c.to_le_bytes());
        f.extend_from_slice(&payload);
        if !self.fits(f.len() as u64) {
            return Err(ArrayError::Meta("incremental area full".into()));
        }
        self.dev.write_at(&f, self.layout.inc_off + self.inc_pos)?;
        self.dev.flush()?;
        self.inc_pos += f.len() as u64;
        self.seq += 1;
        self.frames += 1;
        Ok(())
    }

    /// Load the newest valid checkpoint and replay the incremental frames of its epoch.
    pub fn load(&mut self, k: usize, stripes: u64) -> Result<MetaState> {
        let mut best: Option<(u64, Vec<u8>)> = None;
        for &off in &self.layout.cp_off {
            let mut h = vec![0u8; CP_HEADER];
            self.dev.read_at(&mut h, off)?;
            if &h[..8] != CP_MAGIC {
                continue;
            }
            let hc = u32::from_le_bytes(h[40..44].try_into().expect("4"));
            if crc32c::crc32c(&h[..40]) != hc
                || u64::from_le_bytes(h[12..20].try_into().expect("8")) != self.salt
            {
                continue;
            }
            let epoch = u64::from_le_bytes(h[20..28].try_into().expect("8"));
            let len = u64::from_le_bytes(h[28..36].try_into().expect("8"));
            let crc = u32::from_le_bytes(h[36..40].try_into().expect("4"));
            if len + CP_HEADER as u64 > self.layout.cp_size {
                continue;
            }
            let mut body = vec![0u8; len as usize];
            self.dev.read_at(&mut body, off + CP_HEADER as u64)?;
            if crc32c::crc32c(&body) != crc {
                continue;
            }
            if best.as_ref().is_none_or(|(e, _)| epoch > *e) {
                best = Some((epoch, body));
            }
        }
        let (epoch, body) = best.ok_or_else(|| {
            ArrayError::Meta("no valid full checkpoint on the metadata volume".into())
        })?;
        let mut st = MetaState::decode(k, stripes, &body)?;
        self.epoch = epoch;
        self.inc_pos = 0;
        self.seq = 0;
        // Replay frames of this epoch in sequence; stop at the first one that does not check out.
        loop {
            if self.inc_pos + FRAME_HEADER as u64 > self.layout.inc_size {
                break;
            }
            let base = self.layout.inc_off + self.inc_pos;
            let mut h = [0u8; FRAME_HEADER];
            self.dev.read_at(&mut h, base)?;
            let magic = u32::from_le_bytes(h[0..4].try_into().expect("4"));
            let len = u32::from_le_bytes(h[4..8].try_into().expect("4")) as u64;
            let salt = u64::from_le_bytes(h[8..16].try_into().expect("8"));
            let ep = u64::from_le_bytes(h[16..24].try_into().expect("8"));
            let seq = u64::from_le_bytes(h[24..32].try_into().expect("8"));
            let crc = u32::from_le_bytes(h[32..36].try_into().expect("4"));
            if magic != FRAME_MAGIC
                || salt != self.salt
                || ep != epoch
                || seq != self.seq
                || self.inc_pos + FRAME_HEADER as u64 + len > self.layout.inc_size
            {
                break;
            }
            let mut payload = vec![0u8; len as usize];
            self.dev.read_at(&mut payload, base + FRAME_HEADER as u64)?;
            let c = crc32c::crc32c_append(crc32c::crc32c(&h[..32]), &payload);
            if c != crc {
                break;
            }
            let mut d = Dec::new(&payload);
            let mut recs = Vec::new();
            while !d.done() {
                recs.push(Rec::decode(&mut d)?);
            }
            for r in &recs {
                st.apply(r);
            }
            self.inc_pos += FRAME_HEADER as u64 + len;
            self.seq += 1;
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(k: usize) -> MetaState {
        let mut st = MetaState::new(k, 300);
        let recs = vec![
            Rec::StripeWritten { stripe: 5 },
            Rec::StripeWritten { stripe: 299 },
            Rec::FullStripe { stripe: 7 },
            Rec::LogStripe {
                id: 0,
                off: 0,
                members: vec![
                    Member {
                        dev: 1,
                        slot: 301,
                        stripe: 7,
                        pos: 2,
                    },
                    Member {
                        dev: 3,
                        slot: 9,
                        stripe: 9,
                        pos: 0,
                    },
                ],
            },
            Rec::PlLog { stripe: 5, off: 1 },
            Rec::PlLog { stripe: 5, off: 2 },
            Rec::DeviceFailed { dev: 4 },
            Rec::CommitBegin,
            Rec::Dirty { region: 3 },
            Rec::Dirty { region: 0 },
        ];
        for r in &recs {
            st.apply(r);
        }
        st
    }

    #[test]
    fn checkpoint_roundtrip() {
        let st = sample(4);
        let back = MetaState::decode(4, 300, &st.encode()).unwrap();
        assert_eq!(back, st);
        assert!(back.is_written(299) && !back.is_written(6));
        assert_eq!(back.stripes[&7].latest[2], Some((301, 0)));
        assert_eq!(back.log_next, 3);
        assert!(back.commit_in_progress);
        let enc = st.encode();
        assert!((enc.len() as u64) < MetaState::max_encoded(4, 6, 300, 400, 10));
    }

    #[test]
    fn truncated_or_garbage_checkpoints_are_errors_not_panics() {
        let st = sample(4);
        let enc = st.encode();
        // The write-intent section is optional (checkpoints from before it existed end without it;
        // the checkpoint's CRC catches a real truncation there).
        let without_intent = enc.len() - 8 - 8 * st.dirty.len();
        for cut in 0..enc.len() {
            let r = MetaState::decode(4, 300, &enc[..cut]);
            if cut == without_intent {
                assert!(r.unwrap().dirty.is_empty());
            } else {
                assert!(r.is_err(), "cut {cut}");
            }
        }
        let mut x = 0x1234_5678u64;
        for _ in 0..200 {
            let v: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = MetaState::decode(4, 300, &v);
        }
    }

    #[test]
    fn commit_done_folds_latest_into_committed() {
        let mut st = sample(4);
        st.apply(&Rec::CommitDone);
        assert_eq!(st.stripes[&7].committed[2], Some(301));
        assert_eq!(st.stripes[&9].committed[0], Some(9));
        assert!(st.stripes.values().all(|d| !d.pending() && d.parity));
        assert!(st.logs.is_empty() && st.pl_logs.is_empty());
        assert_eq!(st.log_next, 0);
        assert!(!st.commit_in_progress);
    }
}
