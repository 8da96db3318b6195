"""Numeric code over tensor values: summary statistics (``stats``), the comparison metric vector (``metrics``) and
the block-streaming helpers both share (``blocks``). Everything here works on numpy arrays alone; nothing reads or
writes a report."""
