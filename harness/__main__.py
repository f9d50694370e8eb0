"""``python -m harness`` is ``critpath``; torchrun launches it this way (``torchrun ... -m harness run``)."""
from harness.cli import main

raise SystemExit(main())
