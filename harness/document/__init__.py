"""A document as a list of blocks (heading, paragraph, table, image), rendered to markdown and to
self-contained HTML, and the CJK font subset that HTML embeds: what reports, history and
acceptance write their pages with."""
