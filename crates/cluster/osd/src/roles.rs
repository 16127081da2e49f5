//! Who may call each RPC of `osd.proto` (docs/cluster.md, "Roles"); the daemon mounts its service
//! behind `ecstack_rpc::Security::guard` with this table.
//!
//! Clients (and admins) call a segment's primary: write, read, update, and a direct read's plan.
//! A direct read also fetches chunk ranges from the holders (`GetChunk`), so `GetChunk` is open to
//! clients too: it reads no more than `ReadSegment` would. Every other chunk call (store, update,
//! parity delta, version, delete) is OSD-to-OSD only. A robust file's blocks (`PutBlocks`,
//! `GetBlocks`, `DeleteBlocks`) are client calls: its writer and readers talk to every OSD.

use ecstack_rpc::roles::{Role, RoleTable};

const OSD: &[Role] = &[Role::Osd];
const CLIENT: &[Role] = &[Role::Client, Role::Admin];
const READER: &[Role] = &[Role::Osd, Role::Client, Role::Admin];

pub static OSD_ROLES: RoleTable = RoleTable {
    service: "ecstack.osd.v1.Osd",
    methods: &[
        ("WriteSegment", CLIENT),
        ("ReadSegment", CLIENT),
        ("UpdateSegment", CLIENT),
        ("ReadPlan", CLIENT),
        ("PutChunk", OSD),
        ("GetChunk", READER),
        ("UpdateChunk", OSD),
        ("ApplyDelta", OSD),
        ("ChunkVersion", OSD),
        ("DeleteChunk", OSD),
        ("PutBlocks", CLIENT),
        ("GetBlocks", CLIENT),
        ("DeleteBlocks", CLIENT),
    ],
};
