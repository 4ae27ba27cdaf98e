(** Every exported theorem, for `make proofs`: each must print
    "Closed under the global context". *)
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Validate Normalform Synth
  Synthlib Synthproof Constructproof Traffic Trafficproof Search Searchproof Refine Factor Exec Pipeline Pipelineproof.

Print Assumptions apply_spec.
Print Assumptions step_wf.
Print Assumptions check_ok_iff.
Print Assumptions check_accepts_iff_chain.
Print Assumptions check_error_first.
Print Assumptions moves_spec.
Print Assumptions moves_enum_iff.
Print Assumptions perm_src_blocks.
Print Assumptions permute_table_perm.
Print Assumptions perm_src_fixed.
Print Assumptions source_sound.
Print Assumptions movement_correct.
Print Assumptions synthesize_correct.
Print Assumptions synthesize_memory.
Print Assumptions synthesize_normal_form.
Print Assumptions synthesize_gather_traffic.
Print Assumptions gathers_traffic.
Print Assumptions normal_form_peak.
Print Assumptions synthesize_guaranteed.
Print Assumptions synthesize_guaranteed_pow2.
Print Assumptions synthesize_guaranteed_prime.
Print Assumptions ndevices_rmesh.
Print Assumptions refine_wf.
Print Assumptions refine_size.
Print Assumptions refine_gindex.
Print Assumptions refine_local.
Print Assumptions factors_prod.
Print Assumptions factors_prime.
Print Assumptions exec_correct.
Print Assumptions check_exec.
Print Assumptions plan_spec.
Print Assumptions from_others_le_recv.
Print Assumptions recv_worst_device.
Print Assumptions recv_max.
Print Assumptions accepted_traffic_need.
Print Assumptions accepted_traffic_lower_bound.
Print Assumptions pick_min.
Print Assumptions synthesize_best_prime.
Print Assumptions synthesize_best_min.
Print Assumptions plan_traffic.
Print Assumptions plan_traffic_optimal.

From VS Require Import Uneven Unevenproof.
Print Assumptions csize_even.
Print Assumptions uvalid_le.
Print Assumptions uvalid_even.
Print Assumptions uvalid_sum.
Print Assumptions ublocks_partition.
Print Assumptions ublock_order.
Print Assumptions csize_padding.
Print Assumptions wf_uneven_of_wf.
Print Assumptions wf_unevenb_spec.
Print Assumptions ugindex_gindex.
Print Assumptions uvalid_pos_even.
Print Assumptions usize_even.
Print Assumptions usize_chunked_le.
Print Assumptions usize_max_padded.
Print Assumptions ugather_buf_bound.
Print Assumptions usource_sound.
Print Assumptions usource_sound_chunked.
Print Assumptions umovement_correct.
Print Assumptions usource_in_buffer.
Print Assumptions ustep_wf.
Print Assumptions ustep_of_step.
Print Assumptions usource_even.

From VS Require Import Monoid Partial Partialproof.
Print Assumptions msum_perm.
Print Assumptions msum_app.
Print Assumptions msum_reindex.
Print Assumptions gsum_perm.
Print Assumptions represents_nil.
Print Assumptions pwfb_spec.
Print Assumptions pstep_wf.
Print Assumptions papply_spec.
Print Assumptions pcoll_sound.
Print Assumptions allreduce_sound.
Print Assumptions reducescatter_sound.
Print Assumptions topartial_sound.
Print Assumptions pstep_sound.
Print Assumptions pexec_correct.
Print Assumptions pexec_correct_nil.
Print Assumptions pexec_plain.
Print Assumptions allreduce_rs_ag.
Print Assumptions allreduce_rs_ag_data.

From VS Require Import Pchecker Ppipeline Ppipelineproof.
Print Assumptions pcheck_ok.
Print Assumptions pcheck_correct.
Print Assumptions pvalidate_spec.
Print Assumptions pfallback_ok.
Print Assumptions pplan_spec.
Print Assumptions pplan_plain.

From VS Require Import Uchecker Ucheckerproof Upipeline Upipelineproof.
Print Assumptions uapply_spec.
Print Assumptions ucstep_wf.
Print Assumptions ucheck_ok.
Print Assumptions usrc_sound.
Print Assumptions ucheck_correct.
Print Assumptions ucheck_correct_chunked.
Print Assumptions ucheck_peak.
Print Assumptions ucheck_peak_ge.
Print Assumptions urefine_ugindex.
Print Assumptions urefine_uvalid_pos.
Print Assumptions ufallback_ok.
Print Assumptions uplan_spec.
Print Assumptions ucheck_of_check.
Print Assumptions uplan_even.

From VS Require Import Crossmesh Crossmeshproof.
Print Assumptions cells_count.
Print Assumptions cells_vol.
Print Assumptions cells_own.
Print Assumptions sched1_traffic.
Print Assumptions xsched_correct.
Print Assumptions xsched_assemble.
Print Assumptions xplan_correct.

From VS Require Import Rounds Roundsproof.
Print Assumptions runs_count.
Print Assumptions cut_box_count.
Print Assumptions tcuts_count.
Print Assumptions pack_perm.
Print Assumptions pack_bounded.
Print Assumptions xrounds_correct.

From VS Require Import Chunk Chunkproof.
Print Assumptions chunk_range_divides.
Print Assumptions chunk_source_coord.
Print Assumptions piece_interval.
Print Assumptions chunk_decompose.
Print Assumptions held_bound.
Print Assumptions held_refined.

From VS Require Import Utraffic Utrafficproof.
Print Assumptions ufrom_others_le_urecv.
Print Assumptions ucheck_traffic_need.
Print Assumptions ucheck_traffic_lower_bound.
Print Assumptions ulower_bound_even.

From VS Require Import Exchange Exchangeproof.
Print Assumptions exchange_correct.
Print Assumptions exchange_lower_bound.
Print Assumptions free_dim_spec.
Print Assumptions exchange_chunk.
Print Assumptions echeck_spec.
Print Assumptions echeck_exchange.
Print Assumptions eplan_spec.
Print Assumptions uexchange_correct.
Print Assumptions uecheck_spec.
Print Assumptions uecheck_exchange.
Print Assumptions ueplan_spec.
Print Assumptions exchange_total.
Print Assumptions ueplan_peak.
Print Assumptions uexchange_lower_bound.

From VS Require Import Ptrafficproof.
Print Assumptions pcheck_traffic_need.
Print Assumptions pcheck_traffic_lower_bound.

From VS Require Import Puexchange Puexchangeproof.
Print Assumptions puplan_total.
Print Assumptions puexec_correct.
Print Assumptions puplan_peak.
Print Assumptions puplan_lower_bound.

From VS Require Import Certify Certifyproof.
Print Assumptions cands_complete.
Print Assumptions permute_targets_complete.
Print Assumptions certify_sound.
Print Assumptions certify_traffic_minimal.

From VS Require Import Refineplan.
Print Assumptions refine_check.
Print Assumptions certify_split_minimal.

From VS Require Import Boxes Boxesproof.
Print Assumptions bsub_hits.
Print Assumptions bsched_correct.
