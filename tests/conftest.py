"""Test-wide settings."""

import warnings

# torch's reference modules warn about their own mask conventions; not our concern.
warnings.filterwarnings("ignore", module="torch")
