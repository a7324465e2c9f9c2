"""The catalog: what dse knows before any design exists, validated once.

Owns the field vocabulary (:mod:`.fields`: one range check, one unknown-key hint), the
specs of devices, models and runtimes (:mod:`.specs`), the database loader
(:mod:`.database`), the technology constants that synthesise chips
(:mod:`.technology`) and the measured rank profiles of tree drafting
(:mod:`.rank_profiles`). Every number is converted to SI on load (MODEL.md section 0).
"""
