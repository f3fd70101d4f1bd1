"""Static CSS and JS inlined into the HTML pages (package data: ``opfuse.report.assets``)."""
