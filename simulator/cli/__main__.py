"""``python -m simulator.cli`` runs the ``fabricsim`` command."""

from . import main

raise SystemExit(main())
