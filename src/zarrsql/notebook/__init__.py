"""The notebook experience: progress of long scans, `describe`, and the IPython magics.

Above the engine: these modules may use every layer below, and none below imports them; the
scan reader reaches the progress display only through `zarrsql.counters`.
"""
