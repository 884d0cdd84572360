"""L3 text: what a markdown file and a question become before anything is stored or searched.

- ``tokenizer``: one token per CJK character, whole (stemmed) words for everything else;
- ``chunker``: markdown into chunks that respect its headings and code fences;
- ``units``: the passages a chunk is embedded as (the chunk and each of its items);
- ``query``: what a user types into safe FTS5 expressions, and highlighted snippets;
- ``dates``: the days a question names ("上周三", "last Tuesday", "九月中旬");
- ``translate``: a question's words through CC-CEDICT, for the lexical side;
- ``glossary``: what a memory defines (hosts, people, events), read off its own list items.

Pure text in, text or tokens out: no SQLite here (``units`` names the companion model in the
identity of the passages it cuts, so it reads ``models``).
"""
