"""Schema-constrained decoding on the diffusion canvas: tool calls and JSON answers.

A tool call's (or a response_format schema's) fixed JSON skeleton is laid on the canvas and
committed without denoising (up to the first value at once, each later piece as soon as the
value before it is decoded, so the canvas is the exact wire text); only the value slots are
denoised, each under its own logit mask, so the decoded arguments always parse and validate
against the schema, whatever the model's weights.
  layout.py  schema -> fixed tokens + fixed-width value slots      slots.py  slot kinds
  plan.py    tools / tool_choice / response_format -> a Plan        state.py  per-request modes
  hook.py    the runner's per-pass seam (logit masks, blocked commits, canvas writes)
  context.py "x-diffvoice-context": slots narrowed by the conversation (values somebody said,
             names copied from the caller's words), applied before compiling
  reading.py how words name values: times however said or written, enum values by alias phrase
See docs/tool-calling.md.
"""

from diffvoice.engine.constrained.plan import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Plan, build_plan
from diffvoice.engine.constrained.state import ConstrainedState

__all__ = ["TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ConstrainedState", "Plan", "build_plan"]
