"""The Chainlit chat UI, mounted in the API app at /chat."""

import os
from pathlib import Path

# Chainlit reads its config (.chainlit/config.toml, translations, chainlit.md) from CHAINLIT_APP_ROOT when it is
# first imported, and would otherwise create a default .chainlit/ in the current directory: point it here first.
CHAT_DIR = Path(__file__).resolve().parent
os.environ.setdefault("CHAINLIT_APP_ROOT", str(CHAT_DIR))
