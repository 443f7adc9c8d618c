"""The C driver: pyroce's ``libibverbs.so.1``, so unmodified libibverbs programs run on pyroce.

``c/`` holds the C library (control verbs call into Python, data-path verbs write WQEs and read
CQEs in C), ``calls`` the Python side of its control verbs, ``build`` compiles it on first use
(docs/architecture.md, "Unmodified programs: the C driver").
"""
