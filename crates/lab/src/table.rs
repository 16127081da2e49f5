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

/// A report's two text files in `out` (made first): `NAME.md`, the Markdown, and `NAME.csv`, its
/// rows.
pub fn write_report<T: Serialize>(
    out: &Path,
    name: &str,
    markdown: &str,
    rows: &[T],
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(crate::io_at(out))?;
    let md = out.join(format!("{name}.md"));
    std::fs::write(&md, markdown).map_err(crate::io_at(&md))?;
    write_csv(&out.join(format!("{name}.csv")), rows)
}

/// `rows` as CSV text, as [`write_csv`] writes it.
pub fn csv_text<T: Serialize>(rows: &[T]) -> Result<String> {
    let run = |e: csv::Error| LabError::Run(format!("writing CSV: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(run)?;
    }
    let bytes = w.into_inner().map_err(|e| run(e.into_error().into()))?;
    String::from_utf8(bytes).map_err(|e| LabError::Run(format!("writing CSV: {e}")))
}

/// `x` rounded to `digits` decimals, for CSV columns that need no more precision than that (the
/// nearest double to the decimal, so it prints as that decimal).
pub fn round_to(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
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

    #[test]
    fn csv_text_quotes_and_rounds() {
        let rows = [Row {
            name: "trace \"a\", b".into(),
            value: round_to(2.0 / 3.0, 4),
            batch: Some(round_to(1.23456789, 6)),
        }];
        assert_eq!(
            csv_text(&rows).unwrap(),
            "name,value,batch\n\"trace \"\"a\"\", b\",0.6667,1.234568\n"
        );
    }
}
