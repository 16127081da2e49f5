//! The tree picture (seed §3.5): directories as nodes radiating out from the root, sized by the class of
//! their immediate child files' bytes (tiny < 1 KiB, small < 1 MiB, medium < 1 GiB, large < 1 TiB, huge)
//! and coloured by the savings of those files (white none, cold colours small, hot colours large), one
//! colouring per configuration, in one self-contained HTML file (inline SVG, inline script: a
//! configuration selector and a path search). No files are drawn, as in the seed.

use crate::results::{open_db, Manifest};
use crate::ReduceError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// Size classes of the seed, by immediate child files' bytes: (upper bound, name, radius px).
pub const CLASSES: [(u64, &str, f64); 5] = [
    (1 << 10, "tiny (< 1 KiB)", 3.0),
    (1 << 20, "small (KiBs)", 5.0),
    (1 << 30, "medium (MiBs)", 8.0),
    (1 << 40, "large (GiBs)", 12.0),
    (u64::MAX, "huge (TiBs and up)", 17.0),
];

/// Directories labelled on the page (visible text beside the node): the largest by their own files'
/// bytes, skipping any whose label would overlap one already placed; the root is always labelled.
pub const LABELS_MAX: usize = 24;
/// Longest label drawn; a longer path keeps its end, after "…".
const LABEL_CHARS_MAX: usize = 28;
/// Label font size and the width assumed per character (sans-serif at 11 px) for the overlap test.
const LABEL_PX: f64 = 11.0;
const LABEL_CHAR_PX: f64 = 6.6;

/// The saving legend's keys: (saving, label).
const SAVING_KEYS: [(f64, &str); 6] = [
    (0.0, "none"),
    (0.02, "2%"),
    (0.08, "8%"),
    (0.2, "20%"),
    (0.5, "50%"),
    (0.9, "90%"),
];
/// Side of every legend key's box (the largest size class's circle fits).
const KEY_PX: usize = 36;

/// The class index of a directory holding `bytes` directly.
pub fn size_class(bytes: u64) -> usize {
    CLASSES
        .iter()
        .position(|c| bytes < c.0)
        .unwrap_or(CLASSES.len() - 1)
}

/// Colour of a saving fraction (1 − after/original): white for none, light blue → light purple for
/// small savings (< 10%), yellow → orange → red for large ones.
pub fn colour(saving: f64) -> String {
    let s = saving.clamp(0.0, 1.0);
    let lerp = |a: [f64; 3], b: [f64; 3], t: f64| -> String {
        let c: Vec<u8> = (0..3)
            .map(|i| (a[i] + (b[i] - a[i]) * t).round() as u8)
            .collect();
        format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
    };
    if s < 0.005 {
        "#ffffff".into()
    } else if s < 0.10 {
        lerp(
            [204.0, 229.0, 255.0],
            [214.0, 196.0, 255.0],
            (s - 0.005) / 0.095,
        )
    } else if s < 0.5 {
        lerp(
            [255.0, 224.0, 102.0],
            [253.0, 141.0, 60.0],
            (s - 0.10) / 0.40,
        )
    } else {
        lerp([253.0, 141.0, 60.0], [189.0, 0.0, 38.0], (s - 0.5) / 0.5)
    }
}

struct Node {
    path: String,
    depth: usize,
    files: u64,
    bytes: u64,
    reduced: Vec<u64>,
    children: Vec<usize>,
    angle: f64,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn parent(p: &str) -> Option<&str> {
    if p == "." {
        None
    } else {
        Some(p.rfind('/').map_or(".", |i| &p[..i]))
    }
}

/// The text of a node's label: its path below the root (the root: the root's own name), at most
/// [`LABEL_CHARS_MAX`] characters, keeping the end (the deepest names) after "…".
fn label_text(path: &str, root: &str) -> String {
    let full = match path {
        "." => Path::new(root)
            .file_name()
            .map_or_else(|| root.to_string(), |n| n.to_string_lossy().into_owned()),
        p => p.to_string(),
    };
    let chars: Vec<char> = full.chars().collect();
    if chars.len() <= LABEL_CHARS_MAX {
        return full;
    }
    let tail: String = chars[chars.len() + 1 - LABEL_CHARS_MAX..].iter().collect();
    format!("…{tail}")
}

/// The width a label is assumed to take (for the overlap test and the picture's margin).
fn label_width(text: &str) -> f64 {
    text.chars().count() as f64 * LABEL_CHAR_PX
}

/// A label placed on the picture: beside node `node`, its text starting at (x, y) to the right, or
/// ending there (left of the node).
struct Label {
    node: usize,
    text: String,
    x: f64,
    y: f64,
    right: bool,
}

/// Place labels for `candidates` (node, text) in order, at most [`LABELS_MAX`], each beside its
/// node (`at(node)` = centre x, y, radius, whether the label goes to the right), skipping one whose
/// box would overlap a label already placed.
fn place_labels(
    candidates: &[(usize, String)],
    at: impl Fn(usize) -> (f64, f64, f64, bool),
) -> Vec<Label> {
    let mut placed: Vec<Label> = Vec::new();
    let mut boxes: Vec<[f64; 4]> = Vec::new();
    let gap = 3.0;
    for (node, text) in candidates {
        if placed.len() >= LABELS_MAX {
            break;
        }
        let (cx, cy, r, right) = at(*node);
        let w = label_width(text);
        let x = if right { cx + r + gap } else { cx - r - gap };
        let (x0, x1) = if right { (x, x + w) } else { (x - w, x) };
        let b = [x0, cy - LABEL_PX * 0.7, x1, cy + LABEL_PX * 0.7];
        let clash = boxes
            .iter()
            .any(|o| b[0] < o[2] && o[0] < b[2] && b[1] < o[3] && o[1] < b[3]);
        if clash {
            continue;
        }
        boxes.push(b);
        placed.push(Label {
            node: *node,
            text: text.clone(),
            x,
            y: cy,
            right,
        });
    }
    placed
}

/// Write the HTML tree report of a results directory; at most `nodes_max` directories (the largest by
/// bytes, with their ancestors). Returns the number of directories drawn.
pub fn write_html(dir: &Path, out: &Path, nodes_max: usize) -> Result<usize, ReduceError> {
    let m = Manifest::load(dir)?;
    let conn = open_db(dir)?;
    let nc = m.configurations.len();
    // Per directory: files, bytes (immediate child files), reduced per configuration.
    let mut per: BTreeMap<String, (u64, u64, Vec<u64>)> = BTreeMap::new();
    {
        let mut st = conn.prepare("SELECT dir, COUNT(*), SUM(bytes) FROM file GROUP BY dir")?;
        for r in st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? as u64,
            ))
        })? {
            let (d, f, b) = r?;
            per.insert(d, (f, b, vec![0; nc]));
        }
        let mut st = conn.prepare("SELECT f.dir, o.config, SUM(o.reduced_bytes) FROM outcome o JOIN file f ON f.seq = o.seq GROUP BY f.dir, o.config")?;
        for r in st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)? as usize,
                r.get::<_, i64>(2)? as u64,
            ))
        })? {
            let (d, c, red) = r?;
            if let Some(e) = per.get_mut(&d) {
                if c < nc {
                    e.2[c] = red;
                }
            }
        }
    }
    // Keep the largest directories and their ancestors.
    let mut by_size: Vec<(&String, u64)> = per.iter().map(|(k, v)| (k, v.1)).collect();
    by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut keep: BTreeSet<String> = BTreeSet::new();
    keep.insert(".".into());
    for (d, _) in by_size {
        if keep.len() >= nodes_max.max(1) {
            break;
        }
        let mut p = Some(d.as_str());
        while let Some(x) = p {
            keep.insert(x.to_string());
            p = parent(x);
        }
    }
    // Build the tree (BTreeSet order: a parent sorts before its children).
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut ordered: Vec<&String> = keep.iter().collect();
    ordered.sort_by_key(|p| {
        (
            p.matches('/').count() + usize::from(p.as_str() != "."),
            p.to_string(),
        )
    });
    for p in ordered {
        let (files, bytes, reduced) = per.get(p).cloned().unwrap_or((0, 0, vec![0; nc]));
        let depth = if p == "." {
            0
        } else {
            p.matches('/').count() + 1
        };
        let i = nodes.len();
        nodes.push(Node {
            path: p.clone(),
            depth,
            files,
            bytes,
            reduced,
            children: Vec::new(),
            angle: 0.0,
        });
        index.insert(p.clone(), i);
        if let Some(par) = parent(p) {
            let pi = index[par];
            nodes[pi].children.push(i);
        }
    }
    // Radial layout: leaves share the circle evenly in depth-first order; a parent sits at its children's mean angle.
    let leaves = nodes
        .iter()
        .filter(|n| n.children.is_empty())
        .count()
        .max(1);
    let mut next_leaf = 0usize;
    fn place(nodes: &mut Vec<Node>, i: usize, leaves: usize, next: &mut usize) {
        let kids = nodes[i].children.clone();
        if kids.is_empty() {
            nodes[i].angle = std::f64::consts::TAU * (*next as f64 + 0.5) / leaves as f64;
            *next += 1;
        } else {
            let mut sum = 0.0;
            for &k in &kids {
                place(nodes, k, leaves, next);
                sum += nodes[k].angle;
            }
            nodes[i].angle = sum / kids.len() as f64;
        }
    }
    place(&mut nodes, 0, leaves, &mut next_leaf);
    let depth_max = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    let ring = 70.0_f64
        .max(12.0 * leaves as f64 / std::f64::consts::TAU / depth_max.max(1) as f64)
        .min(200.0);
    // Label candidates: the root, then directories with files of their own, largest first.
    let mut candidates: Vec<(usize, String)> = vec![(0, label_text(".", &m.root))];
    let mut by_bytes: Vec<usize> = (1..nodes.len()).filter(|&i| nodes[i].files > 0).collect();
    by_bytes.sort_by(|&a, &b| {
        (nodes[b].bytes.cmp(&nodes[a].bytes)).then(nodes[a].path.cmp(&nodes[b].path))
    });
    candidates.extend(
        by_bytes
            .into_iter()
            .map(|i| (i, label_text(&nodes[i].path, &m.root))),
    );
    // Room around the rings for labels beside the outermost nodes.
    let label_room = candidates
        .iter()
        .map(|(_, t)| label_width(t))
        .fold(0.0, f64::max);
    let half = ring * depth_max as f64 + 40.0 + label_room;
    let xy = |n: &Node| -> (f64, f64) {
        let r = ring * n.depth as f64;
        (half + r * n.angle.cos(), half + r * n.angle.sin())
    };
    let radius = |n: &Node| {
        if n.files == 0 {
            2.0
        } else {
            CLASSES[size_class(n.bytes)].2
        }
    };
    let labels = place_labels(&candidates, |i| {
        let n = &nodes[i];
        let (x, y) = xy(n);
        // Right of the node on the right half of the circle (and at the root), left of it on the left half.
        (x, y, radius(n), n.depth == 0 || n.angle.cos() >= 0.0)
    });

    let mut h = String::new();
    let title = format!("ecstack reduce: {}", esc(&m.root));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>\
body{{font-family:sans-serif;margin:1em}} #tree{{border:1px solid #ccc;background:#fafafa;max-width:100%;height:auto}} \
#legend{{display:grid;grid-template-columns:repeat({cols},auto);justify-content:start;align-items:center;column-gap:1.2em;row-gap:2px}} \
#legend .item{{display:flex;align-items:center;gap:6px}} #legend .key{{flex:none;width:{KEY_PX}px;height:{KEY_PX}px;display:flex;align-items:center;justify-content:center}} \
#legend .sw{{width:14px;height:14px;box-sizing:border-box;border:1px solid #555}}\
</style></head><body>\n<h1>{title}</h1>\n<p>{} files, {} bytes analysed; {} directories drawn (the largest {} and their ancestors). \
Node size: bytes of the directory's own files (before reduction); colour: saving of the selected configuration; labels: the root and the largest directories.</p>\n",
        m.files,
        m.bytes,
        nodes.len(),
        nodes_max,
        cols = 1 + CLASSES.len().max(SAVING_KEYS.len()),
    );
    let _ = write!(h, "<p><label>configuration <select id=\"cfg\">");
    for c in &m.configurations {
        let _ = write!(h, "<option value=\"{}\">{}</option>", c.id, esc(&c.label));
    }
    let _ = writeln!(h, "</select></label> <label>search path <input id=\"q\" size=\"40\"></label> <span id=\"hits\"></span></p>");
    // The legend: one grid, a row for sizes and one for savings, every key in a box of the same
    // size with its label centred beside it, so keys and labels line up along and across the rows.
    let _ = write!(h, "<div id=\"legend\"><b>size</b>");
    let half_key = KEY_PX / 2;
    for (_, name, r) in CLASSES {
        let _ = write!(h, "<span class=\"item\"><svg class=\"key\" width=\"{KEY_PX}\" height=\"{KEY_PX}\"><circle cx=\"{half_key}\" cy=\"{half_key}\" r=\"{r}\" fill=\"#fff\"/></svg><span class=\"name\">{}</span></span>", esc(name));
    }
    for _ in CLASSES.len()..SAVING_KEYS.len() {
        let _ = write!(h, "<span></span>");
    }
    let _ = write!(h, "<b>saving</b>");
    for (s, name) in SAVING_KEYS {
        let _ = write!(
            h,
            "<span class=\"item\"><span class=\"key\"><span class=\"sw\" style=\"background:{}\"></span></span><span class=\"name\">{name}</span></span>",
            colour(s)
        );
    }
    let _ = writeln!(h, "</div>");
    let size = 2.0 * half;
    let _ = writeln!(h, "<svg id=\"tree\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{size:.0}\" height=\"{size:.0}\" viewBox=\"0 0 {size:.0} {size:.0}\">\n\
<style>circle{{stroke:#555;stroke-width:0.8}} circle.hit{{stroke:#e00;stroke-width:3}} line{{stroke:#bbb;stroke-width:0.8}} \
text.label{{font-family:sans-serif;font-size:{LABEL_PX}px;fill:#222;dominant-baseline:central;paint-order:stroke;stroke:#fafafa;stroke-width:3px;stroke-linejoin:round}}</style>");
    for n in &nodes {
        let (x1, y1) = xy(n);
        for &k in &n.children {
            let (x2, y2) = xy(&nodes[k]);
            let _ = writeln!(
                h,
                "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\"/>"
            );
        }
    }
    for n in &nodes {
        let (x, y) = xy(n);
        let savings: Vec<String> = n
            .reduced
            .iter()
            .map(|&r| {
                if n.bytes == 0 {
                    "0".to_string()
                } else {
                    format!("{:.4}", 1.0 - r as f64 / n.bytes as f64)
                }
            })
            .collect();
        let s0 = savings
            .first()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        let r = radius(n);
        let _ = writeln!(
            h,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" fill=\"{}\" data-path=\"{}\" data-s=\"{}\"><title>{} — {} files, {} bytes</title></circle>",
            colour(s0),
            esc(&n.path),
            savings.join(","),
            esc(&n.path),
            n.files,
            n.bytes
        );
    }
    for l in &labels {
        let _ = writeln!(
            h,
            "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{}\" data-path=\"{}\">{}</text>",
            l.x,
            l.y,
            if l.right { "start" } else { "end" },
            esc(&nodes[l.node].path),
            esc(&l.text)
        );
    }
    let _ = writeln!(h, "</svg>");
    let _ = writeln!(
        h,
        "<script>\n{}\nconst cs=[...document.querySelectorAll('#tree circle')];\n\
function paint(){{const i=+document.getElementById('cfg').selectedIndex;for(const c of cs){{const s=+c.dataset.s.split(',')[i];c.setAttribute('fill',colour(s));\
c.querySelector('title').textContent=c.dataset.path+' \\u2014 saving '+(100*s).toFixed(2)+'%';}}}}\n\
function search(){{const q=document.getElementById('q').value;let n=0;for(const c of cs){{const h=q.length>0&&c.dataset.path.includes(q);c.classList.toggle('hit',h);if(h)n++;}}\
document.getElementById('hits').textContent=q?n+' match':'';}}\n\
document.getElementById('cfg').addEventListener('change',paint);document.getElementById('q').addEventListener('input',search);paint();\n</script>\n</body></html>",
        JS_COLOUR
    );
    std::fs::write(out, h).map_err(|e| ReduceError::Io(format!("{}: {e}", out.display())))?;
    Ok(nodes.len())
}

/// `colour` in JavaScript (the same bands as the Rust function).
const JS_COLOUR: &str = "function colour(s){s=Math.min(1,Math.max(0,s));const L=(a,b,t)=>'#'+[0,1,2].map(i=>Math.round(a[i]+(b[i]-a[i])*t).toString(16).padStart(2,'0')).join('');\
if(s<0.005)return '#ffffff';if(s<0.10)return L([204,229,255],[214,196,255],(s-0.005)/0.095);if(s<0.5)return L([255,224,102],[253,141,60],(s-0.10)/0.40);return L([253,141,60],[189,0,38],(s-0.5)/0.5);}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_colours() {
        assert_eq!(size_class(0), 0);
        assert_eq!(size_class(1023), 0);
        assert_eq!(size_class(1024), 1);
        assert_eq!(size_class(5 << 20), 2);
        assert_eq!(size_class(3 << 30), 3);
        assert_eq!(size_class(2 << 40), 4);
        assert_eq!(colour(0.0), "#ffffff");
        assert_eq!(colour(1.0), "#bd0026");
        assert_eq!(colour(0.10), "#ffe066");
    }
}
