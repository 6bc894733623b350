"""Model cards built from lineage: gathered, then rendered as Markdown, HTML and JSON."""
