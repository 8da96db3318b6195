"""Analysis over whole reports, built on :mod:`reportdb.numeric`: device tensors against their golden records
(``golden``), one run against another (``runs``), and pictures of a tensor (``plot``)."""
