(** Every exported theorem, for `make proofs`: each must print
    "Closed under the global context". *)
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Synth.

Print Assumptions apply_spec.
Print Assumptions step_wf.
Print Assumptions check_ok_iff.
Print Assumptions check_accepts_iff_chain.
Print Assumptions check_error_first.
Print Assumptions perm_src_blocks.
Print Assumptions permute_table_perm.
Print Assumptions perm_src_fixed.
Print Assumptions source_sound.
Print Assumptions movement_correct.
