"""The tables nightly prints (rich's box drawing), read back as one line a row: a long cell
folds over several lines of the table (the piped table keeps within its width), so a phrase
a test looks for may stand across them."""

from __future__ import annotations


def unfold_tables(text: str) -> str:
    """`text` with each table row on one line: its continuation lines (first cell blank, as
    many cells) joined to it cell by cell, white space folded; other lines as they are."""
    out: list[str] = []
    cells: list[list[str]] | None = None

    def flush() -> None:
        nonlocal cells
        if cells is not None:
            out.append("│ " + " │ ".join(" ".join(" ".join(c).split()) for c in cells) + " │")
            cells = None

    for line in text.splitlines():
        row = line.strip()
        if not (row.startswith("│") and row.endswith("│") and len(row) > 1):
            flush()
            out.append(line)
            continue
        parts = [p.strip() for p in row[1:-1].split("│")]
        if cells is not None and parts[0] == "" and len(parts) == len(cells):
            for cell, part in zip(cells, parts, strict=True):
                if part:
                    cell.append(part)
            continue
        flush()
        cells = [[p] if p else [] for p in parts]
    flush()
    return "\n".join(out)
