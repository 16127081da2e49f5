//! A file's update scheme (CodFS §2.1.2, §4.1): where the OSDs keep a small update's new data bytes
//! and its parity deltas. It is chosen when the file is created, stored by the MDS with the file,
//! carried in every layout, and recorded in each chunk's header (docs/cluster.md "Update schemes").
//! The OSD's rules per scheme live in `ecstack_osd::update` (one file each); the MDS and the OSDs
//! take the type from `ecstack-mds-proto`, which re-exports it.

use std::fmt;
use std::str::FromStr;

/// How a file's updates are stored. CodFS's "PL" is [`UpdateScheme::ParityLog`], named `codfs-pl`:
/// the local array's `pl` (EPLOG's parity logging) is another design.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpdateScheme {
    /// Full overwrite: data and parity changed in place (parity by deltas).
    #[default]
    Fo,
    /// Full logging: data changes and parity deltas are appended to a log beside each chunk.
    Fl,
    /// CodFS PL (parity logging): data in place, parity deltas appended to a log beside each parity.
    ParityLog,
    /// Parity logging with reserved space: data in place, parity deltas appended in space reserved
    /// right after each parity chunk in the same file; merged into the parity when it fills.
    Plr,
}

impl UpdateScheme {
    pub const ALL: [UpdateScheme; 4] = [
        UpdateScheme::Fo,
        UpdateScheme::Fl,
        UpdateScheme::ParityLog,
        UpdateScheme::Plr,
    ];

    /// Its name in configs, flags, reports: `fo`, `fl`, `codfs-pl`, `plr`.
    pub fn name(self) -> &'static str {
        match self {
            UpdateScheme::Fo => "fo",
            UpdateScheme::Fl => "fl",
            UpdateScheme::ParityLog => "codfs-pl",
            UpdateScheme::Plr => "plr",
        }
    }

    /// Its number on the wire, in the MDS's store and in a chunk header's flags (0..=3).
    pub fn code(self) -> u32 {
        match self {
            UpdateScheme::Fo => 0,
            UpdateScheme::Fl => 1,
            UpdateScheme::ParityLog => 2,
            UpdateScheme::Plr => 3,
        }
    }

    /// The scheme numbered `code`, or one line naming the bad number.
    pub fn from_code(code: u32) -> Result<UpdateScheme, String> {
        UpdateScheme::ALL
            .into_iter()
            .find(|s| s.code() == code)
            .ok_or_else(|| format!("unknown update scheme number {code} (known: 0..=3)"))
    }

    /// Data changes are appended to a log (FL), not written in place.
    pub fn logs_data(self) -> bool {
        self == UpdateScheme::Fl
    }

    /// Parity deltas are appended (to a log or the reserve), not XORed in place at once.
    pub fn logs_parity(self) -> bool {
        self != UpdateScheme::Fo
    }
}

impl fmt::Display for UpdateScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for UpdateScheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(found) = UpdateScheme::ALL.into_iter().find(|x| x.name() == s) {
            return Ok(found);
        }
        if s.eq_ignore_ascii_case("pl") {
            return Err(
                "update scheme `pl` is ambiguous: CodFS's parity logging is `codfs-pl` (the local array's `pl` is EPLOG's)"
                    .into(),
            );
        }
        Err(format!(
            "unknown update scheme `{s}` (known: fo, fl, codfs-pl, plr)"
        ))
    }
}

/// By name (`cluster.toml`'s `[update] scheme = "plr"`); a bad name fails with the one line of
/// [`FromStr`] (a bare `pl` names `codfs-pl`).
impl serde::Serialize for UpdateScheme {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for UpdateScheme {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip_and_a_bare_pl_names_codfs_pl() {
        for s in UpdateScheme::ALL {
            assert_eq!(s.name().parse::<UpdateScheme>(), Ok(s));
            assert_eq!(UpdateScheme::from_code(s.code()), Ok(s));
        }
        let e = "pl".parse::<UpdateScheme>().unwrap_err();
        assert!(e.contains("codfs-pl"), "{e}");
        assert!("xx".parse::<UpdateScheme>().unwrap_err().contains("xx"));
        assert!(UpdateScheme::from_code(4).is_err());
    }
}
