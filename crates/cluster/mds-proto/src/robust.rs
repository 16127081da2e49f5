//! Robust files (RobuSTore on the cluster, docs/robustore.md "On the cluster"): the domain types
//! of their metadata, their conversion from and to the wire, and the [`MdsClient`] calls. A robust
//! file is split into objects; an object of K source blocks is stored as N = ceil((1 + D)·K) coded
//! blocks of a rateless code (LT or RaptorQ) spread over OSDs, each block named by its coded id in
//! the object's id space and the object version it was written at.

use crate::api::{required, MdsClient, MdsError, RobustBlockKey};
use crate::proto;

/// The rateless code of a robust file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobustCode {
    /// RobuSTore's LT code (`ecstack_codes::LtCode`).
    Lt,
    /// RFC 6330 RaptorQ (`ecstack_codes::RaptorQ`).
    RaptorQ,
}

impl RobustCode {
    pub fn name(self) -> &'static str {
        match self {
            RobustCode::Lt => "lt",
            RobustCode::RaptorQ => "raptorq",
        }
    }

    /// `lt` or `raptorq`; anything else is one line naming both.
    pub fn parse(s: &str) -> Result<RobustCode, String> {
        match s {
            "lt" => Ok(RobustCode::Lt),
            "raptorq" => Ok(RobustCode::RaptorQ),
            _ => Err(format!(
                "unknown robust code {s:?}: the codes are lt and raptorq"
            )),
        }
    }
}

impl std::fmt::Display for RobustCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a robust file is coded; fixed at its creation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RobustParams {
    pub code: RobustCode,
    /// Bytes per coded block (RaptorQ: 32 symbols of `block_bytes / 32`).
    pub block_bytes: u32,
    /// D: an object of K source blocks stores N = ceil((1 + D)·K) coded blocks.
    pub redundancy: f64,
    /// Source blocks per object (the last object may have fewer).
    pub object_blocks: u32,
    /// LT's robust soliton C and δ (0 for RaptorQ).
    pub lt_c: f64,
    pub lt_delta: f64,
}

impl RobustParams {
    /// Refuses parameters no code can take, with one line.
    pub fn check(&self) -> Result<(), String> {
        if self.block_bytes == 0 {
            return Err("a robust file's block size must be at least 1 byte".into());
        }
        if !(self.redundancy.is_finite() && self.redundancy > 0.0) {
            return Err(format!(
                "redundancy D = {} is refused: it must be a number above 0 (N = (1 + D)·K blocks)",
                self.redundancy
            ));
        }
        if self.object_blocks == 0 {
            return Err("a robust object needs at least 1 source block".into());
        }
        if self.code == RobustCode::Lt
            && !(self.lt_c.is_finite()
                && self.lt_c > 0.0
                && self.lt_delta > 0.0
                && self.lt_delta < 1.0)
        {
            return Err(format!(
                "LT parameters C = {}, δ = {} are refused: they need C > 0 and 0 < δ < 1",
                self.lt_c, self.lt_delta
            ));
        }
        Ok(())
    }

    /// N for an object of `k` source blocks: ceil((1 + D)·K), at least K + 1.
    pub fn n_for(&self, k: u32) -> u32 {
        let n = ((1.0 + self.redundancy) * f64::from(k)).ceil();
        (n.min(f64::from(u32::MAX)) as u32).max(k.saturating_add(1))
    }
}

/// Where one coded block lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPlacement {
    pub key: RobustBlockKey,
    pub osd_id: u32,
    /// The holder's address (filled in replies; empty in requests).
    pub addr: String,
    /// The holder is UP (filled in replies).
    pub up: bool,
}

/// One object of a robust file with its committed blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobustObject {
    /// The OSDs' key for its blocks (from the MDS's segment counter).
    pub object_id: u64,
    /// Position in the file.
    pub index: u32,
    /// Data bytes.
    pub length: u64,
    /// Source blocks.
    pub k: u32,
    /// Blocks the writer stores: ceil((1 + D)·K).
    pub n: u32,
    /// N′ > N: the coded ids a writer may use.
    pub id_space: u32,
    /// LT: the graph seed that decodes (0 for RaptorQ).
    pub seed: u64,
    /// 1 at creation, +1 per update.
    pub version: u64,
    /// The committed blocks (ids distinct), by id.
    pub blocks: Vec<BlockPlacement>,
}

/// A robust file's coding and block map (in [`crate::FileInfo::robust`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RobustInfo {
    pub params: RobustParams,
    /// By index.
    pub objects: Vec<RobustObject>,
    /// Objects with fewer than n blocks on OSDs that are not out.
    pub objects_below_n: u32,
}

impl From<RobustParams> for proto::RobustParams {
    fn from(p: RobustParams) -> Self {
        proto::RobustParams {
            code: p.code.name().to_owned(),
            block_bytes: p.block_bytes,
            redundancy: p.redundancy,
            object_blocks: p.object_blocks,
            lt_c: p.lt_c,
            lt_delta: p.lt_delta,
        }
    }
}

impl TryFrom<proto::RobustParams> for RobustParams {
    type Error = MdsError;
    fn try_from(p: proto::RobustParams) -> Result<Self, MdsError> {
        Ok(RobustParams {
            code: RobustCode::parse(&p.code).map_err(MdsError::Protocol)?,
            block_bytes: p.block_bytes,
            redundancy: p.redundancy,
            object_blocks: p.object_blocks,
            lt_c: p.lt_c,
            lt_delta: p.lt_delta,
        })
    }
}

impl From<BlockPlacement> for proto::BlockPlacement {
    fn from(b: BlockPlacement) -> Self {
        proto::BlockPlacement {
            block: Some(b.key.into()),
            osd_id: b.osd_id,
            addr: b.addr,
            up: b.up,
        }
    }
}

impl TryFrom<proto::BlockPlacement> for BlockPlacement {
    type Error = MdsError;
    fn try_from(b: proto::BlockPlacement) -> Result<Self, MdsError> {
        Ok(BlockPlacement {
            key: required(b.block, "a block placement's key")?.into(),
            osd_id: b.osd_id,
            addr: b.addr,
            up: b.up,
        })
    }
}

impl From<RobustObject> for proto::RobustObject {
    fn from(o: RobustObject) -> Self {
        proto::RobustObject {
            object_id: o.object_id,
            index: o.index,
            length: o.length,
            k: o.k,
            n: o.n,
            id_space: o.id_space,
            seed: o.seed,
            version: o.version,
            blocks: o.blocks.into_iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<proto::RobustObject> for RobustObject {
    type Error = MdsError;
    fn try_from(o: proto::RobustObject) -> Result<Self, MdsError> {
        Ok(RobustObject {
            object_id: o.object_id,
            index: o.index,
            length: o.length,
            k: o.k,
            n: o.n,
            id_space: o.id_space,
            seed: o.seed,
            version: o.version,
            blocks: o
                .blocks
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<RobustInfo> for proto::RobustInfo {
    fn from(r: RobustInfo) -> Self {
        proto::RobustInfo {
            params: Some(r.params.into()),
            objects: r.objects.into_iter().map(Into::into).collect(),
            objects_below_n: r.objects_below_n,
        }
    }
}

impl TryFrom<proto::RobustInfo> for RobustInfo {
    type Error = MdsError;
    fn try_from(r: proto::RobustInfo) -> Result<Self, MdsError> {
        Ok(RobustInfo {
            params: required(r.params, "a robust file's parameters")?.try_into()?,
            objects: r
                .objects
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
            objects_below_n: r.objects_below_n,
        })
    }
}

/// A robust object's next version, as [`MdsClient::update_robust_object`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobustUpdate {
    pub file_id: u64,
    pub object_id: u64,
    /// The object's current version + 1.
    pub version: u64,
    /// Blocks written at `version` (an id here replaces its older block).
    pub added: Vec<BlockPlacement>,
    /// Blocks no longer part of the object.
    pub dropped: Vec<RobustBlockKey>,
    /// LT: the graph seed now.
    pub seed: u64,
}

impl MdsClient {
    /// Starts a put of a robust file: `objects` carry index, length, k, n, id_space and seed;
    /// returns the file id and each object's id (by index).
    pub async fn create_robust_file(
        &self,
        path: &str,
        params: RobustParams,
        size: u64,
        objects: &[RobustObject],
    ) -> Result<(u64, Vec<u64>), MdsError> {
        let reply = self
            .raw()
            .create_robust_file(proto::CreateRobustFileRequest {
                path: path.to_owned(),
                params: Some(params.into()),
                size,
                objects: objects.iter().cloned().map(Into::into).collect(),
            })
            .await?
            .into_inner();
        Ok((reply.file_id, reply.object_ids))
    }

    /// Makes a robust put visible at its path, with every object's blocks.
    pub async fn commit_robust_file(
        &self,
        file_id: u64,
        objects: &[RobustObject],
    ) -> Result<(), MdsError> {
        self.raw()
            .commit_robust_file(proto::CommitRobustFileRequest {
                file_id,
                objects: objects.iter().cloned().map(Into::into).collect(),
            })
            .await?;
        Ok(())
    }

    /// Records an object's next version; returns the object as it is now.
    pub async fn update_robust_object(&self, u: &RobustUpdate) -> Result<RobustObject, MdsError> {
        let reply = self
            .raw()
            .update_robust_object(proto::UpdateRobustObjectRequest {
                file_id: u.file_id,
                object_id: u.object_id,
                version: u.version,
                added: u.added.iter().cloned().map(Into::into).collect(),
                dropped: u.dropped.iter().copied().map(Into::into).collect(),
                seed: u.seed,
            })
            .await?
            .into_inner();
        required(reply.object, "the updated object")?.try_into()
    }
}
