"""Preloaded first by a forkserver (``FORKSERVER_FIRST`` in own_names): importing it takes
stagebot's package root off ``sys.path`` before the next preloads import what a folder of ours
could shadow (transformers imports ``kernels``). Python 3.11 starts the forkserver as
``python -c`` in the parent's working directory and does not give it the parent's ``sys.path``."""

from stagebot.harness.run.own_names import drop_package_root

drop_package_root()
