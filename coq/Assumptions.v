(** Every exported theorem, for `make proofs`: each must print
    "Closed under the global context". *)
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Validate Normalform Synth
  Synthlib Synthproof Constructproof Traffic Trafficproof Search Searchproof Refine Factor Exec Pipeline Pipelineproof.

Print Assumptions VS.Rules.apply_spec.
Print Assumptions VS.Rules.step_wf.
Print Assumptions VS.Checker.check_ok_iff.
Print Assumptions VS.Checker.check_accepts_iff_chain.
Print Assumptions VS.Checker.check_error_first.
Print Assumptions VS.Checker.moves_spec.
Print Assumptions VS.Checker.moves_enum_iff.
Print Assumptions VS.Permute.perm_src_blocks.
Print Assumptions VS.Permute.permute_table_perm.
Print Assumptions VS.Permute.perm_src_fixed.
Print Assumptions VS.Semantics.source_sound.
Print Assumptions VS.Semantics.movement_correct.
Print Assumptions VS.Synthproof.synthesize_correct.
Print Assumptions VS.Synthproof.synthesize_memory.
Print Assumptions VS.Synthproof.synthesize_normal_form.
Print Assumptions VS.Synthproof.synthesize_gather_traffic.
Print Assumptions VS.Normalform.gathers_traffic.
Print Assumptions VS.Normalform.normal_form_peak.
Print Assumptions VS.Constructproof.synthesize_guaranteed.
Print Assumptions VS.Constructproof.synthesize_guaranteed_pow2.
Print Assumptions VS.Constructproof.synthesize_guaranteed_prime.
Print Assumptions VS.Refine.ndevices_rmesh.
Print Assumptions VS.Refine.refine_wf.
Print Assumptions VS.Refine.refine_size.
Print Assumptions VS.Refine.refine_gindex.
Print Assumptions VS.Refine.refine_local.
Print Assumptions VS.Factor.factors_prod.
Print Assumptions VS.Factor.factors_prime.
Print Assumptions VS.Exec.exec_correct.
Print Assumptions VS.Exec.check_exec.
Print Assumptions VS.Pipelineproof.plan_spec.
Print Assumptions VS.Trafficproof.from_others_le_recv.
Print Assumptions VS.Trafficproof.recv_worst_device.
Print Assumptions VS.Trafficproof.recv_max.
Print Assumptions VS.Trafficproof.accepted_traffic_need.
Print Assumptions VS.Trafficproof.accepted_traffic_lower_bound.
Print Assumptions VS.Searchproof.pick_min.
Print Assumptions VS.Searchproof.synthesize_best_prime.
Print Assumptions VS.Searchproof.synthesize_best_min.
Print Assumptions VS.Pipelineproof.plan_traffic.
Print Assumptions VS.Pipelineproof.plan_traffic_optimal.

From VS Require Import Uneven Unevenproof.
Print Assumptions VS.Unevenproof.csize_even.
Print Assumptions VS.Unevenproof.uvalid_le.
Print Assumptions VS.Unevenproof.uvalid_even.
Print Assumptions VS.Unevenproof.uvalid_sum.
Print Assumptions VS.Unevenproof.ublocks_partition.
Print Assumptions VS.Unevenproof.ublock_order.
Print Assumptions VS.Unevenproof.csize_padding.
Print Assumptions VS.Unevenproof.wf_uneven_of_wf.
Print Assumptions VS.Unevenproof.wf_unevenb_spec.
Print Assumptions VS.Unevenproof.ugindex_gindex.
Print Assumptions VS.Unevenproof.uvalid_pos_even.
Print Assumptions VS.Unevenproof.usize_even.
Print Assumptions VS.Unevenproof.usize_chunked_le.
Print Assumptions VS.Unevenproof.usize_max_padded.
Print Assumptions VS.Unevenproof.ugather_buf_bound.
Print Assumptions VS.Unevenproof.usource_sound.
Print Assumptions VS.Unevenproof.usource_sound_chunked.
Print Assumptions VS.Unevenproof.umovement_correct.
Print Assumptions VS.Unevenproof.usource_in_buffer.
Print Assumptions VS.Unevenproof.ustep_wf.
Print Assumptions VS.Unevenproof.ustep_of_step.
Print Assumptions VS.Unevenproof.usource_even.

From VS Require Import Monoid Partial Partialproof.
Print Assumptions VS.Monoid.msum_perm.
Print Assumptions VS.Monoid.msum_app.
Print Assumptions VS.Monoid.msum_reindex.
Print Assumptions VS.Partialproof.gsum_perm.
Print Assumptions VS.Partialproof.represents_nil.
Print Assumptions VS.Partialproof.pwfb_spec.
Print Assumptions VS.Partialproof.pstep_wf.
Print Assumptions VS.Partialproof.papply_spec.
Print Assumptions VS.Partialproof.pcoll_sound.
Print Assumptions VS.Partialproof.allreduce_sound.
Print Assumptions VS.Partialproof.reducescatter_sound.
Print Assumptions VS.Partialproof.topartial_sound.
Print Assumptions VS.Partialproof.pstep_sound.
Print Assumptions VS.Partialproof.pexec_correct.
Print Assumptions VS.Partialproof.pexec_correct_nil.
Print Assumptions VS.Partialproof.pexec_plain.
Print Assumptions VS.Partialproof.allreduce_rs_ag.
Print Assumptions VS.Partialproof.allreduce_rs_ag_data.

From VS Require Import Pchecker Ppipeline Ppipelineproof.
Print Assumptions VS.Pchecker.pcheck_ok.
Print Assumptions VS.Pchecker.pcheck_correct.
Print Assumptions VS.Pchecker.pvalidate_spec.
Print Assumptions VS.Ppipelineproof.pfallback_ok.
Print Assumptions VS.Ppipelineproof.pplan_spec.
Print Assumptions VS.Ppipelineproof.pplan_spec_user.
Print Assumptions VS.Ppipelineproof.pplan_plain.

From VS Require Import Uchecker Ucheckerproof Upipeline Upipelineproof.
Print Assumptions VS.Ucheckerproof.uapply_spec.
Print Assumptions VS.Ucheckerproof.ucstep_wf.
Print Assumptions VS.Ucheckerproof.ucheck_ok.
Print Assumptions VS.Ucheckerproof.usrc_sound.
Print Assumptions VS.Ucheckerproof.ucheck_correct.
Print Assumptions VS.Ucheckerproof.ucheck_correct_chunked.
Print Assumptions VS.Ucheckerproof.ucheck_peak.
Print Assumptions VS.Ucheckerproof.ucheck_peak_ge.
Print Assumptions VS.Upipelineproof.urefine_ugindex.
Print Assumptions VS.Upipelineproof.urefine_uvalid_pos.
Print Assumptions VS.Upipelineproof.ufallback_ok.
Print Assumptions VS.Upipelineproof.uplan_spec.
Print Assumptions VS.Upipelineproof.ucheck_of_check.
Print Assumptions VS.Upipelineproof.uplan_even.

From VS Require Import Crossmesh Crossmeshproof.
Print Assumptions VS.Crossmeshproof.cells_count.
Print Assumptions VS.Crossmeshproof.cells_vol.
Print Assumptions VS.Crossmeshproof.cells_own.
Print Assumptions VS.Crossmeshproof.sched1_traffic.
Print Assumptions VS.Crossmeshproof.xsched_correct.
Print Assumptions VS.Crossmeshproof.xsched_assemble.
Print Assumptions VS.Crossmeshproof.xplan_correct.
Print Assumptions VS.Crossmeshproof.xplan_correct_valid.

From VS Require Import Rounds Roundsproof.
Print Assumptions VS.Roundsproof.runs_count.
Print Assumptions VS.Roundsproof.cut_box_count.
Print Assumptions VS.Roundsproof.tcuts_count.
Print Assumptions VS.Roundsproof.pack_perm.
Print Assumptions VS.Roundsproof.pack_bounded.
Print Assumptions VS.Roundsproof.xrounds_correct.

From VS Require Import Balance Balanceproof.
Print Assumptions VS.Balanceproof.xplan_bal_correct.
Print Assumptions VS.Balanceproof.xrounds_bal_correct.
Print Assumptions VS.Balanceproof.xplan_bal_balanced.
From VS Require Import Perrank Perrankproof.
Print Assumptions VS.Perrankproof.rank_recv_restrict.
Print Assumptions VS.Perrankproof.rank_send_restrict.
Print Assumptions VS.Perrankproof.wplan_correct.
Print Assumptions VS.Perrankproof.rank_send_balanced.

From VS Require Import Chunk Chunkproof.
Print Assumptions VS.Chunkproof.chunk_range_divides.
Print Assumptions VS.Chunkproof.chunk_source_coord.
Print Assumptions VS.Chunkproof.piece_interval.
Print Assumptions VS.Chunkproof.chunk_decompose.
Print Assumptions VS.Chunkproof.held_bound.
Print Assumptions VS.Chunkproof.held_refined.

From VS Require Import Utraffic Utrafficproof.
Print Assumptions VS.Utrafficproof.ufrom_others_le_urecv.
Print Assumptions VS.Utrafficproof.ucheck_traffic_need.
Print Assumptions VS.Utrafficproof.ucheck_traffic_lower_bound.
Print Assumptions VS.Utrafficproof.ulower_bound_even.

From VS Require Import Exchange Exchangeproof.
Print Assumptions VS.Exchangeproof.exchange_correct.
Print Assumptions VS.Exchangeproof.exchange_lower_bound.
Print Assumptions VS.Exchangeproof.free_dim_spec.
Print Assumptions VS.Exchangeproof.exchange_chunk.
Print Assumptions VS.Exchangeproof.echeck_spec.
Print Assumptions VS.Exchangeproof.echeck_exchange.
Print Assumptions VS.Exchangeproof.eplan_spec.
Print Assumptions VS.Exchangeproof.uexchange_correct.
Print Assumptions VS.Exchangeproof.uecheck_spec.
Print Assumptions VS.Exchangeproof.uecheck_exchange.
Print Assumptions VS.Exchangeproof.ueplan_spec.
Print Assumptions VS.Exchangeproof.exchange_total.
Print Assumptions VS.Exchangeproof.ueplan_peak.
Print Assumptions VS.Exchangeproof.uexchange_lower_bound.

From VS Require Import Ptrafficproof.
Print Assumptions VS.Ptrafficproof.pcheck_traffic_need.
Print Assumptions VS.Ptrafficproof.pcheck_traffic_lower_bound.

From VS Require Import Puexchange Puexchangeproof.
Print Assumptions VS.Puexchangeproof.puplan_total.
Print Assumptions VS.Puexchangeproof.puexec_correct.
Print Assumptions VS.Puexchangeproof.puplan_peak.
Print Assumptions VS.Puexchangeproof.puplan_lower_bound.

From VS Require Import Certify Certifyproof.
Print Assumptions VS.Certifyproof.cands_complete.
Print Assumptions VS.Certifyproof.permute_targets_complete.
Print Assumptions VS.Certifyproof.certify_sound.
Print Assumptions VS.Certifyproof.certify_traffic_minimal.

From VS Require Import Refineplan.
Print Assumptions VS.Refineplan.refine_check.
Print Assumptions VS.Certifyproof.certify_split_minimal.

From VS Require Import Commute Commuteproof.
Print Assumptions VS.Commuteproof.along_commutes.
Print Assumptions VS.Commuteproof.along_then_step.
Print Assumptions VS.Commuteproof.along_then_plan.
Print Assumptions VS.Commuteproof.along_then_exchange.
Print Assumptions VS.Commuteproof.along_then_pipeline.
Print Assumptions VS.Commuteproof.along_then_eplan.

From VS Require Import Boxes Boxesproof.
Print Assumptions VS.Boxesproof.bsub_hits.
Print Assumptions VS.Boxesproof.bsched_correct.
Print Assumptions VS.Boxesproof.bsched_in_correct.

From VS Require Import Minimal Minimalproof.
Print Assumptions VS.Minimalproof.mplan_spec.
Print Assumptions VS.Minimalproof.mplan_pipeline.
From VS Require Import Eminimal Eminimalproof.
Print Assumptions VS.Eminimalproof.emplan_spec.
Print Assumptions VS.Eminimalproof.emplan_least.

From VS Require Import Puchecker Pucheckerproof.
Print Assumptions VS.Pucheckerproof.pucheck_correct.
Print Assumptions VS.Pucheckerproof.pucheck_peak.
Print Assumptions VS.Pucheckerproof.pucheck_lower_bound.
Print Assumptions VS.Pucheckerproof.puplan_checked_ok.
Print Assumptions VS.Pucheckerproof.puplan_checked_total.
From VS Require Import Boxesworldproof.
Print Assumptions VS.Boxesworldproof.brounds_correct.

From VS Require Import Layoutchoice Layoutchoiceproof.
Print Assumptions VS.Layoutchoiceproof.tbox_exact.
Print Assumptions VS.Layoutchoiceproof.lplan_spec.

From VS Require Import Cover Coverproof.
Print Assumptions VS.Coverproof.holds_box_spec.
Print Assumptions VS.Coverproof.bcovers_spec.
Print Assumptions VS.Coverproof.brounds_complete.

From VS Require Import Pucheckerlinkproof.
Print Assumptions VS.Pucheckerlinkproof.pucheck_device_memory.
Print Assumptions VS.Pucheckerlinkproof.pucheck_colls_recv.
Print Assumptions VS.Pucheckerlinkproof.pucheck_exch_recv.

From VS Require Import Pucheckerreduceproof.
Print Assumptions VS.Pucheckerreduceproof.rfrom_others_eq.
Print Assumptions VS.Pucheckerreduceproof.pu_reduced_reads.
Print Assumptions VS.Pucheckerreduceproof.pucheck_reduce_recv.
Print Assumptions VS.Pucheckerreduceproof.pucheck_reduce_worst_device.

From VS Require Import Tablesproof.
Print Assumptions VS.Tablesproof.block_starts_spec.
Print Assumptions VS.Tablesproof.movement_spec.
Print Assumptions VS.Tablesproof.umovement_spec.
From VS Require Import Rankrounds Rankroundsproof.
Print Assumptions VS.Rankroundsproof.rank_rounds_agree.
Print Assumptions VS.Rankroundsproof.rank_rounds_partner.
Print Assumptions VS.Rankroundsproof.rank_rounds_budget.
Print Assumptions VS.Rankroundsproof.rank_rounds_perm.
