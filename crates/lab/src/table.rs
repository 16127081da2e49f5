//! Tables: rows of any serializable struct written as CSV through the `csv` crate, one header line
//! from the field names in declaration order.

use std::path::Path;

use serde::Serialize;

use crate::{LabError, Result};

fn csv_error(path: &Path, e: csv::Error) -> LabError {
    match e.into_kind() {
        csv::ErrorKind::Io(source) => LabError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => LabError::Run(format!("{}: {other:?}", path.display())),
    }
}

/// Write `rows` as CSV to `path`: a header line, then one line per row (`None` as an empty field).
pub fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut w = csv::Writer::from_path(path).map_err(|e| csv_error(path, e))?;
    for r in rows {
        w.serialize(r).map_err(|e| csv_error(path, e))?;
    }
    w.flush().map_err(|source| LabError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        name: String,
        value: f64,
        batch: Option<f64>,
    }

    #[test]
    fn header_in_field_order_and_quoting() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("t.csv");
        let rows = [
            Row {
                name: "a, b".into(),
                value: 1.5,
                batch: None,
            },
            Row {
                name: "c".into(),
                value: 2.0,
                batch: Some(3.25),
            },
        ];
        write_csv(&p, &rows).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "name,value,batch\n\"a, b\",1.5,\nc,2.0,3.25\n");
        let missing = tmp.path().join("no/such/dir/t.csv");
        let e = write_csv(&missing, &rows).unwrap_err().to_string();
        assert!(e.starts_with(&missing.display().to_string()), "{e}");
    }
}
