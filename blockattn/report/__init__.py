"""Stage 4, report: summaries (summary.md, report.json tables), the HTML page and its charts."""
