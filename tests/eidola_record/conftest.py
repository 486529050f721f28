import os
import sys

# synth_recording.py (the synthetic n-GPU model) lives beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
