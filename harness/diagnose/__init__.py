"""Fleet diagnosis (``critpath diagnose``): rules over runs from many nodes, a verdict per node
(healthy, suspect, failed) and the slow links of ``tier=pairs`` records. ``rules`` reads the rule
files, ``observe`` places every figure on its nodes, ``evaluate`` judges, ``cli`` prints."""
