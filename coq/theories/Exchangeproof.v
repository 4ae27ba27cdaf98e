(** Proofs for [Exchange.v]: the exchange moves the data (every device ends
    with its target block of any global array), every device receives
    exactly what it needs, so the worst device receives the transfer lower
    bound and no plan receives less; along a free dimension its pieces read
    only their own piece of the input; the checker accepts exactly what it
    should; and the planner's choice keeps [plan_spec]'s plan or takes an
    exchange that receives strictly less. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Traffic Trafficproof Validate Pipelineproof
  Refine Pipeline Uneven Unevenproof Uchecker Ucheckerproof Upipeline Upipelineproof Utraffic Crossmesh Crossmeshproof
  Exchange.
Import ListNotations.

(** * The schedule on one mesh *)

Lemma nth_ranks : forall m i, i < ndevices m -> nth i (ranks m) 0 = i.
Proof. intros. unfold ranks. rewrite seq_nth; auto. Qed.

Lemma exchange_recv_nth : forall m pss,
  exchange_recv m pss = fold_right Nat.max 0 (map (fun j => Crossmesh.traffic j (nth j pss [])) (ranks m)).
Proof. intros. unfold exchange_recv, ranks. rewrite map_along_nth. reflexivity. Qed.

Lemma srcs_ranks : forall m t,
  srcs m (ranks m) t = map (fun i => (i, blocks m t (coords_of_rank m i))) (ranks m).
Proof.
  intros m t. rewrite srcs_nth. unfold ranks. apply map_ext_in. intros i Hi. apply in_seq in Hi.
  rewrite seq_nth by lia. reflexivity.
Qed.

Lemma find_ranked : forall (f : nat -> list nat) len a j, a <= j < a + len ->
  find (fun s => fst s =? j) (map (fun i => (i, f i)) (seq a len)) = Some (j, f j).
Proof.
  intros f len. induction len as [|len IH]; intros a j Hj; [lia|]. simpl.
  destruct (a =? j) eqn:E.
  - apply Nat.eqb_eq in E. subst. reflexivity.
  - apply Nat.eqb_neq in E. apply IH. lia.
Qed.

Lemma vol_tbox : forall m t c, wf m t -> valid m c -> vol (tbox m t c) = size m t.
Proof.
  intros m t c [Hm [Hd _]] Hc. rewrite size_prod. unfold vol, tbox. rewrite map_map. cbn [snd].
  f_equal. apply map_ext_in. intros D HD. apply uvlen_lsize; auto.
  rewrite Forall_forall in Hd. auto.
Qed.

(** What a device holds of its target block is [Traffic.kept]. *)
Lemma owned_kept : forall m t t' c, wf m t -> wf m t' -> valid m c -> length t = length t' ->
  vol (owned (sdims m t) (blocks m t c) (tbox m t' c)) = kept m t t' c.
Proof.
  intros m t t' c [Hm [Hd _]] [_ [Hd' _]] Hc. revert t' Hd'.
  induction t as [|D t IH]; intros [|D' t'] Hd' Hl; simpl in Hl; try discriminate; [reflexivity|].
  inversion Hd as [|? ? HD Ht]; subst. inversion Hd' as [|? ? HD' Ht']; subst.
  unfold kept, vol, sdims, blocks, tbox in *. simpl. rewrite (IH Ht t' Ht') by lia.
  f_equal. unfold isect, overlap. simpl.
  rewrite (ucsize_lsize m D), (ugidx_gidx m D'), (uvlen_lsize m D') by auto.
  unfold gidx. cbn [fst snd]. rewrite !Nat.add_0_r. f_equal. f_equal. lia.
Qed.

Lemma held_kept : forall m t t' j, wf m t -> wf m t' -> length t = length t' -> j < ndevices m ->
  held (sdims m t) (srcs m (ranks m) t) j (tbox m t' (coords_of_rank m j)) = kept m t t' (coords_of_rank m j).
Proof.
  intros m t t' j Ht Ht' Hl Hj. unfold held. rewrite srcs_ranks. unfold ranks.
  rewrite (find_ranked (fun i => blocks m t (coords_of_rank m i))) by lia. cbn [snd].
  apply owned_kept; auto. apply coords_of_rank_valid. apply Ht.
Qed.

Lemma gsize_length : forall t t' : atype, map gsize t = map gsize t' -> length t = length t'.
Proof. intros t t' H. rewrite <- (map_length gsize t), <- (map_length gsize t'), H. reflexivity. Qed.

(** Every piece of an exchange comes from a device of the mesh, lies in that
    device's source block and in the receiver's target block; no well-formedness needed. *)
Lemma exchange_cell : forall m t t' pss j q, exchange m t t' = Some pss -> j < ndevices m ->
  In q (nth j pss []) ->
  psrc q < ndevices m /\ pcell q = blocks m t (coords_of_rank m (psrc q)) /\
  forall p, in_boxb p (pbox q) = true ->
    in_boxb p (tbox m t' (coords_of_rank m j)) = true /\ in_boxb p (cellbox (sdims m t) (pcell q)) = true.
Proof.
  intros m t t' pss j q H Hj Hq. destruct (xplan_correct _ _ _ _ _ _ _ H) as [_ Hn].
  destruct (Hn j Hj) as [ps [E [_ [_ [Hsrc _]]]]]. rewrite (nth_error_nth _ _ [] E) in Hq.
  destruct (Hsrc q Hq) as [Hin Hbox]. rewrite srcs_ranks in Hin.
  apply in_map_iff in Hin. destruct Hin as [i [Ei Hi]]. injection Ei as E1 E2.
  unfold ranks in Hi. apply in_seq in Hi. rewrite <- E1. split; [lia|]. split; [auto|].
  exact Hbox.
Qed.

(** The schedule of device [j] of an exchange: every element of its block
    arrives from a device holding it, at its global index; it receives from
    the others exactly [need]: its block less what it holds. *)
Lemma exchange_device : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  length pss = ndevices m /\
  forall j, j < ndevices m ->
    (forall V (A : list nat -> V) i, in_range m t' i ->
       assemble (fun r => local A m t (coords_of_rank m r)) (sdims m t) (tbox m t' (coords_of_rank m j))
         (nth j pss []) i = Some (local A m t' (coords_of_rank m j) i)) /\
    (forall q, In q (nth j pss []) -> exists i, i < ndevices m /\ psrc q = i /\
       pcell q = blocks m t (coords_of_rank m i)) /\
    Crossmesh.traffic j (nth j pss []) = need m t t' (coords_of_rank m j).
Proof.
  intros m t t' pss H [Ht [Ht' Hg]]. pose proof (gsize_length _ _ Hg) as Hl.
  assert (Hm : wf_mesh m) by apply Ht.
  destruct (xplan_correct _ _ _ _ _ _ _ H) as [Hlen Hn]. split; [exact Hlen|].
  intros j Hj. destruct (Hn j Hj) as [ps [E [Hdata [_ [Hsrc [_ Htr]]]]]].
  rewrite (nth_error_nth _ _ [] E). split; [|split].
  - intros V A i Hi.
    rewrite (Hdata V A (fun r => local A m t (coords_of_rank m r))).
    + unfold local. rewrite ugindex_gindex; auto.
    + intros i' Hi' k. rewrite nth_ranks by auto. unfold local. rewrite ugindex_gindex; auto.
    + apply uvalid_pos_even; auto. apply coords_of_rank_valid; auto.
  - intros q Hq. destruct (Hsrc q Hq) as [Hin _]. rewrite srcs_ranks in Hin.
    apply in_map_iff in Hin. destruct Hin as [i [Ei Hi]]. injection Ei as E1 E2.
    unfold ranks in Hi. apply in_seq in Hi. exists i. split; [lia|]. auto.
  - rewrite nth_ranks in Htr by auto. rewrite Htr, held_kept, vol_tbox by auto using coords_of_rank_valid.
    reflexivity.
Qed.

(** **Data**: with every device holding its [t] block of a global array,
    every device assembles from its schedule exactly its [t'] block. *)
Theorem exchange_correct : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  forall V (A : list nat -> V) j i, j < ndevices m -> in_range m t' i ->
  assemble (fun r => local A m t (coords_of_rank m r)) (sdims m t) (tbox m t' (coords_of_rank m j))
    (nth j pss []) i = Some (local A m t' (coords_of_rank m j) i).
Proof.
  intros m t t' pss H Hv V A j i Hj Hi. destruct (exchange_device _ _ _ _ H Hv) as [_ Hd].
  apply (Hd j Hj). auto.
Qed.

(** **Traffic**: the worst device receives the lower bound, which no plan
    of collectives the checker accepts goes below
    ([Trafficproof.accepted_traffic_lower_bound]). *)
Theorem exchange_lower_bound : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  exchange_recv m pss = lower_bound m t t' /\
  forall j, j < ndevices m -> Crossmesh.traffic j (nth j pss []) = need m t t' (coords_of_rank m j).
Proof.
  intros m t t' pss H Hv. destruct (exchange_device _ _ _ _ H Hv) as [_ Hd].
  split.
  - rewrite exchange_recv_nth. unfold lower_bound, ranks. f_equal. apply map_ext_in. intros j Hj.
    apply in_seq in Hj. apply Hd. lia.
  - intros j Hj. apply Hd; auto.
Qed.

(** * Pieces along a free dimension *)

Lemma cellbox_length : forall sd ks, length (cellbox sd ks) = Nat.min (length sd) (length ks).
Proof. induction sd; intros [|k ks]; simpl; auto. Qed.

Lemma cellbox_start : forall sd ks ch, fst (nth ch (cellbox sd ks) (0, 0)) = nth ch ks 0 * fst (nth ch sd (0, 0)).
Proof.
  induction sd as [|cn sd IH]; intros [|k ks] [|ch]; simpl; auto; try lia.
Qed.

(** Along a dimension where [B] starts at 0 the offset within [B] is the
    global index itself. *)
Lemma unshift_start0 : forall B p ch, fst (nth ch B (0, 0)) = 0 ->
  nth ch (unshift B p) 0 = if ch <? length B then nth ch p 0 else 0.
Proof.
  induction B as [|iv B IH]; intros p ch H.
  - destruct p, ch; reflexivity.
  - destruct p as [|x p].
    + destruct ch as [|ch]; simpl; [reflexivity|]. destruct (S ch <? S (length B)); reflexivity.
    + destruct ch as [|ch]; simpl in H |- *.
      * rewrite H. lia.
      * rewrite IH by auto. reflexivity.
Qed.

Lemma free_from_spec : forall t t' d ch, free_from d t t' = Some ch ->
  d <= ch /\ exists D D', nth_error t (ch - d) = Some D /\ nth_error t' (ch - d) = Some D' /\
    axes D = [] /\ axes D' = [] /\ 2 <= gsize D.
Proof.
  induction t as [|D t IH]; intros [|D' t'] d ch H; cbn [free_from] in H; try discriminate.
  destruct (axes D) as [|a A] eqn:E1; [destruct (axes D') as [|a' A'] eqn:E2|].
  - destruct (2 <=? gsize D) eqn:E3.
    + injection H as <-. split; auto. exists D, D'. rewrite Nat.sub_diag. simpl.
      apply Nat.leb_le in E3. auto.
    + destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
      replace (ch - d) with (S (ch - S d)) by lia. exact HH.
  - destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
    replace (ch - d) with (S (ch - S d)) by lia. exact HH.
  - destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
    replace (ch - d) with (S (ch - S d)) by lia. exact HH.
Qed.

Theorem free_dim_spec : forall t t' ch, free_dim t t' = Some ch ->
  exists D D', nth_error t ch = Some D /\ nth_error t' ch = Some D' /\
    axes D = [] /\ axes D' = [] /\ 2 <= gsize D.
Proof.
  intros t t' ch H. destruct (free_from_spec _ _ _ _ H) as [_ HH]. rewrite Nat.sub_0_r in HH. exact HH.
Qed.

(** **Pieces**: along a dimension [ch] that neither type shards, every
    element a device receives is read from its sender's block at the same
    coordinate along [ch] as it is written in the receiver's block. So the
    exchange splits into pieces by that coordinate, piece [p] of the output
    reading only piece [p] of the input, and the chunked schedule holds
    what [Chunk.held] counts ([Chunkproof.held_bound]). *)
Theorem exchange_chunk : forall m t t' pss ch D D', exchange m t t' = Some pss -> map gsize t = map gsize t' ->
  nth_error t ch = Some D -> axes D = [] -> nth_error t' ch = Some D' -> axes D' = [] ->
  forall j q p, j < ndevices m -> In q (nth j pss []) ->
  nth ch (unshift (cellbox (sdims m t) (pcell q)) p) 0
  = nth ch (unshift (tbox m t' (coords_of_rank m j)) p) 0.
Proof.
  intros m t t' pss ch D D' H Hg E1 A1 E2 A2 j q p Hj Hq.
  pose proof (gsize_length _ _ Hg) as Hl.
  destruct (exchange_cell _ _ _ _ _ _ H Hj Hq) as [_ [Ec _]].
  rewrite !unshift_start0.
  - rewrite cellbox_length, Ec. unfold sdims, blocks, tbox. rewrite !map_length, Hl, Nat.min_id. reflexivity.
  - unfold tbox. rewrite (nth_error_nth _ _ (0, 0) (map_nth_error _ _ _ E2)). cbn [fst].
    unfold ugidx, block. rewrite A2. reflexivity.
  - rewrite cellbox_start, Ec. unfold blocks.
    rewrite (nth_error_nth _ _ 0 (map_nth_error _ _ _ E1)). unfold block. rewrite A1. reflexivity.
Qed.

(** * The checker *)

Lemma peak_pair : forall m src dst, peak_of m [src; dst] = bound m src dst.
Proof. intros. unfold peak_of, bound. simpl. lia. Qed.

(** * The planner *)


(** * Uneven types *)

(** A position of a target box that lies in a source cell is a valid
    position of that cell's block: the box lies within the array. *)
Lemma cell_read_valid : forall m t t' c c' p, map gsize t = map gsize t' ->
  in_boxb p (tbox m t' c) = true -> in_boxb p (cellbox (sdims m t) (blocks m t c')) = true ->
  uvalid_pos m t c' (unshift (cellbox (sdims m t) (blocks m t c')) p).
Proof. intros. eapply cell_read_uvalid; eauto. Qed.

(** **Data, uneven**: whatever the source buffers hold at padding
    positions, if every valid position of every device holds its element of
    [A], every device assembles at every valid position of its target block
    the element of [A] there: the exchange reads valid positions only. *)
Theorem uexchange_correct : forall m t t' pss, exchange m t t' = Some pss -> uvalid_problem m t t' ->
  forall V (A : list nat -> V) (x : coords -> list nat -> V),
  (forall r k, r < ndevices m -> uvalid_pos m t (coords_of_rank m r) k -> x (coords_of_rank m r) k = A (ugindex m t (coords_of_rank m r) k)) ->
  forall j i, j < ndevices m -> uvalid_pos m t' (coords_of_rank m j) i ->
  assemble (fun r => x (coords_of_rank m r)) (sdims m t) (tbox m t' (coords_of_rank m j)) (nth j pss []) i
    = Some (A (ugindex m t' (coords_of_rank m j) i)).
Proof.
  intros m t t' pss H [Ht [Ht' Hg]] V A x Hx j i Hj Hi.
  destruct (xplan_correct _ _ _ _ _ _ _ H) as [_ Hn]. destruct (Hn j Hj) as [ps [E [Hdata _]]].
  rewrite (nth_error_nth _ _ [] E).
  pose proof (Hdata V A (fun r k => A (ugindex m t (coords_of_rank m r) k))) as Hd.
  rewrite <- Hd; [| intros i' Hi' k; rewrite nth_ranks by auto; reflexivity | exact Hi].
  unfold assemble. destruct (find _ ps) as [q|] eqn:Ef; [|reflexivity].
  apply find_some in Ef as [Hq Hp].
  rewrite <- (nth_error_nth _ _ [] E) in Hq.
  destruct (exchange_cell _ _ _ _ _ _ H Hj Hq) as [Hsl [Ec Hbox]].
  destruct (Hbox _ Hp) as [HT HC]. rewrite Ec in *. f_equal. apply Hx; auto.
  eapply cell_read_valid; eauto.
Qed.

Lemma upeak_pair : forall m src dst, upeak_of m [src; dst] = ubound m src dst.
Proof. intros. unfold upeak_of, ubound. simpl. lia. Qed.

(** What the exchange schedule [pss] of a valid uneven problem does: every
    device receives from the others exactly the valid elements of its target
    block that it does not hold, and every valid position gets its element
    of any global array, whatever the padding holds. *)
Definition uexchange_spec (m : mesh) (src dst : atype) (pss : list (list piece)) : Prop :=
  (forall j, j < ndevices m -> Crossmesh.traffic j (nth j pss [])
     = vol (tbox m dst (coords_of_rank m j))
       - held (sdims m src) (srcs m (ranks m) src) j (tbox m dst (coords_of_rank m j))) /\
  (forall V (A : list nat -> V) (x : coords -> list nat -> V),
     (forall r k, r < ndevices m -> uvalid_pos m src (coords_of_rank m r) k ->
        x (coords_of_rank m r) k = A (ugindex m src (coords_of_rank m r) k)) ->
     forall j i, j < ndevices m -> uvalid_pos m dst (coords_of_rank m j) i ->
     assemble (fun r => x (coords_of_rank m r)) (sdims m src) (tbox m dst (coords_of_rank m j))
       (nth j pss []) i = Some (A (ugindex m dst (coords_of_rank m j) i))).

Lemma uexchange_spec_holds : forall m src dst pss, exchange m src dst = Some pss -> uvalid_problem m src dst ->
  uexchange_spec m src dst pss.
Proof.
  intros m src dst pss Ex Hv. split.
  - intros j Hj. destruct (xplan_correct _ _ _ _ _ _ _ Ex) as [_ Hn].
    destruct (Hn j Hj) as [ps [E [_ [_ [_ [_ Htr]]]]]].
    rewrite (nth_error_nth _ _ [] E). rewrite nth_ranks in Htr by auto. exact Htr.
  - intros. apply uexchange_correct; auto.
Qed.


(** * The schedule builder answers every valid problem *)

(** Every vector of block numbers is some device's. *)
Lemma blocks_onto : forall m t ks, wf_uneven m t -> length ks = length t ->
  (forall d, d < length t -> nth d ks 0 < nprod m (axes (nth d t (mkdim [] 1)))) ->
  exists c, valid m c /\ blocks m t c = ks.
Proof.
  intros m t. induction t as [|D t IH]; intros [|k ks] [Hm [Hd Hnd]] Hl Hk; simpl in Hl; try discriminate.
  - exists (fun _ => 0). split; [|reflexivity]. intros a Ha. apply Hm; auto.
  - inversion Hd as [|? ? HD Ht]; subst. rewrite used_cons in Hnd.
    destruct (IH ks) as [c' [Hc' Hb]].
    + split; [auto|split; [auto|eapply nodup_app_r; eauto]].
    + lia.
    + intros d Hd'. apply (Hk (S d)). simpl. lia.
    + exists (set_digits m (axes D) c' k). split; [apply set_digits_valid; auto|].
      unfold blocks in *. simpl. f_equal.
      * unfold block. apply set_digits_mr.
        -- eapply nodup_app_l; eauto.
        -- intros a Ha. apply Hm. apply HD; auto.
        -- apply (Hk 0). simpl. lia.
      * rewrite <- Hb. apply map_ext_in. intros D' HD'. unfold block. apply mr_ext.
        intros a Ha. apply set_digits_other. intros Ha'.
        apply (nodup_app_disj _ _ _ a Hnd Ha'). apply in_flat_map. exists D'. auto.
Qed.

Lemma cell_okb_blocks : forall m t c, wf_uneven m t -> valid m c -> cell_okb (sdims m t) (blocks m t c) = true.
Proof.
  intros m t c [Hm [Hd _]] Hc. induction Hd as [|D t HD Hd IH]; simpl; auto.
  rewrite IH, andb_true_r. apply Nat.ltb_lt. apply block_lt; auto.
Qed.

Lemma box_okb_tbox : forall m t t' c, wf_uneven m t -> map gsize t = map gsize t' ->
  box_okb (sdims m t) (tbox m t' c) = true.
Proof.
  intros m t t' c [Hm [Hd _]]. revert t'. induction Hd as [|D t HD Hd IH]; intros [|D' t'] Hg;
    simpl in Hg; try discriminate; simpl; auto.
  injection Hg as Hg1 Hg2. rewrite IH by auto. rewrite andb_true_r.
  pose proof (nprod_pos_dim m D Hm HD) as Hn. destruct HD as [Hg0 _].
  pose proof (csize_pos (gsize D) (nprod m (axes D)) Hg0 Hn) as Hc.
  pose proof (csize_spec (gsize D) (nprod m (axes D)) Hn) as [Hs _].
  apply andb_true_iff. split; [apply Nat.ltb_lt; exact Hc|].
  apply orb_true_iff. unfold uvlen, uvalid, ugidx, ucsize. cbn [fst snd]. rewrite <- Hg1.
  destruct (Nat.le_gt_cases (block m D' c * csize (gsize D) (nprod m (axes D')))
                            (Nat.min (gsize D) (S (block m D' c) * csize (gsize D) (nprod m (axes D'))))).
  - right. apply Nat.leb_le. lia.
  - left. apply Nat.eqb_eq. lia.
Qed.

Lemma pick_all_total : forall SR self j cl,
  (forall kb, In kb cl -> exists r, pick SR self j (fst kb) = Some r) -> exists ps, pick_all SR self j cl = Some ps.
Proof.
  intros SR self j cl. induction cl as [|kb cl IH]; intros H; simpl; [eauto|].
  destruct (H kb (or_introl eq_refl)) as [r Hr]. rewrite Hr.
  assert (Hcl : forall kb, In kb cl -> exists r, pick SR self j (fst kb) = Some r) by (intros; apply H; right; auto).
  destruct (IH Hcl) as [ps Hps]. rewrite Hps. eauto.
Qed.

Lemma pick_total : forall SR self j ks r, In (r, ks) SR -> exists r', pick SR self j ks = Some r'.
Proof.
  intros SR self j ks r H. unfold pick, pick_from.
  assert (Hh : In r (holders SR ks)).
  { unfold holders. apply in_map_iff. exists (r, ks). split; auto. apply filter_In. split; auto.
    apply nat_list_eqb_spec. reflexivity. }
  destruct (memb self (holders SR ks)); [eauto|].
  destruct (nth_error (holders SR ks) (j mod length (holders SR ks))) eqn:E; [eauto|].
  apply nth_error_None in E. destruct (holders SR ks) as [|h l]; [contradiction|].
  pose proof (Nat.mod_upper_bound j (length (h :: l))). simpl in *. lia.
Qed.

Lemma incart_cells : forall sd T ks B, incart (cellsl sd T) ks B -> box_okb sd T = true ->
  length ks = length sd /\ forall d, d < length sd -> nth d ks 0 < snd (nth d sd (0, 0)).
Proof.
  induction sd as [|[c n] sd IH]; intros T ks B H Hb.
  - destruct T; [|discriminate]. simpl in H. destruct ks, B; try contradiction. simpl. split; [auto|intros; lia].
  - destruct T as [|iv T]; [discriminate|]. simpl in H, Hb.
    destruct ks as [|k ks]; [destruct B; contradiction|]. destruct B as [|iv' B]; [contradiction|].
    destruct H as [H1 H2]. apply andb_true_iff in Hb as [_ Hb].
    destruct (IH T ks B H2 Hb) as [Hl Hn]. apply in_cells1 in H1 as [Hk _].
    split; [simpl; lia|]. intros [|d] Hd; simpl; auto. apply Hn. simpl in Hd. lia.
Qed.

Lemma sched_from_total : forall sd SR tgs j,
  (forall tg, In tg tgs -> forall j, exists ps, sched1 sd SR j tg = Some ps) ->
  exists pss, sched_from sd SR j tgs = Some pss.
Proof.
  intros sd SR tgs. induction tgs as [|tg tgs IH]; intros j H; simpl; [eauto|].
  destruct (H tg (or_introl eq_refl) j) as [ps E]. rewrite E.
  assert (Ht : forall tg', In tg' tgs -> forall j, exists ps, sched1 sd SR j tg' = Some ps) by (intros; apply H; right; auto).
  destruct (IH (S j) Ht) as [pss E']. rewrite E'. eauto.
Qed.

(** **Totality**: the exchange schedule exists for every valid problem,
    even or uneven. *)
Theorem exchange_total : forall m t t', uvalid_problem m t t' -> exists pss, exchange m t t' = Some pss.
Proof.
  intros m t t' [Ht [Ht' Hg]]. pose proof Ht as [Hm _].
  unfold exchange, xplan.
  replace (wf_unevenb m t) with true by (symmetry; apply wf_unevenb_spec; auto).
  replace (wf_unevenb m t') with true by (symmetry; apply wf_unevenb_spec; auto).
  replace (length (ranks m) =? ndevices m) with true by (symmetry; apply Nat.eqb_eq; unfold ranks; apply seq_length).
  replace (nodup_fast (ranks m)) with true by (symmetry; apply nodup_fast_spec, seq_NoDup).
  replace (nat_list_eqb (map gsize t) (map gsize t')) with true by (symmetry; apply nat_list_eqb_spec; auto).
  cbn [andb]. unfold xsched. rewrite sched_in_eq.
  replace (nodup_fast (map fst (srcs m (ranks m) t))) with true.
  2:{ symmetry. apply nodup_fast_spec. rewrite srcs_ranks, map_map. cbn [fst]. rewrite map_id. apply seq_NoDup. }
  replace (forallb (fun s => cell_okb (sdims m t) (snd s)) (srcs m (ranks m) t)) with true.
  2:{ symmetry. apply forallb_forall. intros s Hs. rewrite srcs_ranks in Hs. apply in_map_iff in Hs.
      destruct Hs as [i [<- _]]. apply cell_okb_blocks; auto. apply coords_of_rank_valid; auto. }
  cbn [andb].
  assert (Hall : forall tg, In tg (tgts m (ranks m) t') -> forall j, exists ps, sched1 (sdims m t) (srcs m (ranks m) t) j tg = Some ps).
  { intros [self T] Htg j. rewrite tgts_nth_map in Htg. apply in_map_iff in Htg. destruct Htg as [i [Ei _]].
    injection Ei as _ ET. subst T. unfold sched1. cbn [snd fst]. rewrite box_okb_tbox by auto.
    apply pick_all_total. intros kb Hkb. apply in_cart in Hkb.
    destruct (incart_cells _ _ _ _ Hkb (box_okb_tbox m t t' _ Ht Hg)) as [Hl Hn].
    unfold sdims in Hl, Hn. rewrite map_length in Hl.
    destruct (blocks_onto m t (fst kb) Ht Hl) as [c [Hc Hb]].
    { intros d Hd. specialize (Hn d).
      set (f := fun D : dim => (ucsize m D, nprod m (axes D))) in Hn.
      rewrite map_length in Hn.
      rewrite (nth_indep (map f t) (0, 0) (f (mkdim [] 1))) in Hn by (rewrite map_length; auto).
      rewrite map_nth in Hn. apply Hn; auto. }
    apply (pick_total _ _ _ _ (rank m c)). rewrite srcs_ranks. apply in_map_iff. exists (rank m c). split.
    - f_equal. rewrite <- Hb. unfold blocks. apply map_ext_in. intros D HD. unfold block. apply mr_ext.
      intros a Ha. apply coords_of_rank_rank; auto.
      destruct Ht as [_ [HtD _]]. rewrite Forall_forall in HtD. apply (HtD D HD). exact Ha.
    - unfold ranks. apply in_seq. split; [lia|]. apply rank_lt; auto. }
  apply sched_from_total. exact Hall.
Qed.

Lemma urefine_ubound : forall m fs src dst, splits m fs -> uvalid_problem m src dst ->
  ubound (rmesh fs) (rtype fs src) (rtype fs dst) = ubound m src dst.
Proof.
  intros m fs src dst Hs [[Hm [Hd _]] [[_ [Hd' _]] _]].
  assert (H : forall t, Forall (wf_uneven_dim m) t -> usize_padded (rmesh fs) (rtype fs t) = usize_padded m t).
  { intros t Ht. unfold usize_padded, rtype. rewrite map_map. f_equal. apply map_ext_in. intros D HD.
    rewrite Forall_forall in Ht. destruct (Ht D HD) as [_ HA].
    unfold ucsize, rdim. simpl. rewrite (nprod_flat_grp m); auto. }
  unfold ubound. rewrite !H; auto.
Qed.


(** What a device holds of its target block, valid parts only, is [Utraffic.ukept]. *)
Lemma uowned_ukept : forall m t t' c, map gsize t = map gsize t' ->
  vol (owned (sdims m t) (blocks m t c) (tbox m t' c)) = ukept m t t' c.
Proof.
  intros m t. induction t as [|D t IH]; intros [|D' t'] c Hg; simpl in Hg; try discriminate; [reflexivity|].
  injection Hg as Hg1 Hg2. unfold ukept, vol, sdims, blocks, tbox in *. simpl. rewrite (IH t' c Hg2).
  f_equal. unfold isect, overlap, ugidx, uvlen, uvalid, ucsize. cbn [fst snd]. rewrite <- Hg1.
  set (g := gsize D). set (b := block m D c). set (cs := csize g (nprod m (axes D))).
  set (b' := block m D' c). set (cs' := csize g (nprod m (axes D'))). lia.
Qed.

(** **The exchange reaches the uneven lower bound**: every device receives
    exactly [Utraffic.uneed], the valid elements of its target block that it
    does not hold validly, so the worst device receives
    [Utraffic.ulower_bound], below which no plan the uneven checker accepts
    goes ([Utrafficproof.ucheck_traffic_lower_bound]). *)
Theorem uexchange_lower_bound : forall m t t' pss, exchange m t t' = Some pss -> uvalid_problem m t t' ->
  exchange_recv m pss = ulower_bound m t t' /\
  forall j, j < ndevices m -> Crossmesh.traffic j (nth j pss []) = uneed m t t' (coords_of_rank m j).
Proof.
  intros m t t' pss H [[Hm _] [_ Hg]].
  assert (Hj : forall j, j < ndevices m -> Crossmesh.traffic j (nth j pss []) = uneed m t t' (coords_of_rank m j)).
  { intros j Hj. destruct (xplan_correct _ _ _ _ _ _ _ H) as [_ Hn].
    destruct (Hn j Hj) as [ps [E [_ [_ [_ [_ Htr]]]]]].
    rewrite nth_ranks in Htr by auto. rewrite (nth_error_nth _ _ [] E), Htr.
    unfold held. rewrite srcs_ranks. unfold ranks.
    rewrite (find_ranked (fun i => blocks m t (coords_of_rank m i))) by lia. cbn [snd].
    rewrite uowned_ukept by auto. unfold uneed, usize, vol, tbox. rewrite map_map. reflexivity. }
  split; auto.
  rewrite exchange_recv_nth. unfold ulower_bound, ranks. f_equal. apply map_ext_in. intros j Hin.
  apply in_seq in Hin. apply Hj. lia.
Qed.

(** A valid problem is a valid uneven problem. *)
Lemma valid_uvalid_problem : forall m src dst, valid_problem m src dst -> uvalid_problem m src dst.
Proof. intros m src dst [Hs [Hd Hg]]. split; [apply wf_uneven_of_wf; auto|split; [apply wf_uneven_of_wf; auto|exact Hg]]. Qed.

(** * The checkers

    They accept the one-step exchange of a valid problem without building
    its schedule, which [exchange_total] gives, and report what its worst
    device receives as the lower bound, which [exchange_lower_bound] /
    [uexchange_lower_bound] say it receives. *)

(** What the checker accepts: a plan of collectives that [Checker.check]
    accepts, with its report; or the one-step exchange to the target of a
    valid problem, with the peak [bound src dst] and the lower bound as what
    the worst device receives. *)
Theorem echeck_spec : forall m src dst p r, echeck m src dst p = Ok r ->
  (exists cs, colls p = Some cs /\ check m src dst cs = Ok r) \/
  (p = [Exch dst] /\ valid_problem m src dst /\ exists pss, exchange m src dst = Some pss /\
     r = mkreport [src; dst] (bound m src dst) [lower_bound m src dst]).
Proof.
  intros m src dst p r H. unfold echeck, echeck_with in H.
  destruct p as [|[c|t'] [|s p]]; try (left; destruct (colls _) as [cs|] eqn:E; [exists cs; split; auto|discriminate]; fail).
  right. destruct (problem_error m src dst) eqn:Ep; [discriminate|].
  destruct (atype_eqb t' dst) eqn:Et; [|discriminate]. apply atype_eqb_spec in Et. subst t'.
  apply problem_error_valid in Ep. injection H as <-.
  destruct (exchange_total m src dst (valid_uvalid_problem m src dst Ep)) as [pss Ex].
  split; auto. split; auto. exists pss. split; auto. f_equal. apply peak_pair.
Qed.

Theorem echeck_exchange : forall m src dst pss, valid_problem m src dst -> exchange m src dst = Some pss ->
  echeck m src dst [Exch dst] = Ok (mkreport [src; dst] (bound m src dst) [lower_bound m src dst]).
Proof.
  intros m src dst pss Hv Hx. unfold echeck, echeck_with. rewrite problem_error_none by auto.
  replace (atype_eqb dst dst) with true by (symmetry; apply atype_eqb_spec; auto).
  do 2 f_equal. apply peak_pair.
Qed.

(** What the uneven checker accepts: a plan of collectives [ucheck]
    accepts, or the one-step exchange of a valid uneven problem, with the
    peak [ubound] (the least any plan reaches, [ucheck_peak_ge]). *)
Theorem uecheck_spec : forall m src dst p r, uecheck m src dst p = Ok r ->
  (exists cs, colls p = Some cs /\ ucheck m src dst cs = Ok r) \/
  (p = [Exch dst] /\ uvalid_problem m src dst /\ exists pss, exchange m src dst = Some pss /\
     r = mkureport [src; dst] (ubound m src dst) [exchange_recv m pss]).
Proof.
  intros m src dst p r H. unfold uecheck, echeck_with in H.
  destruct p as [|[c|t'] [|s p]]; try (left; destruct (colls _) as [cs|] eqn:E; [exists cs; split; auto|discriminate]; fail).
  right. destruct (uproblem_error m src dst) eqn:Ep; [discriminate|].
  destruct (atype_eqb t' dst) eqn:Et; [|discriminate]. apply atype_eqb_spec in Et. subst t'.
  apply uproblem_error_spec in Ep. injection H as <-.
  destruct (exchange_total m src dst Ep) as [pss Ex].
  split; auto. split; auto. exists pss. split; auto.
  rewrite (proj1 (uexchange_lower_bound m src dst pss Ex Ep)). f_equal. apply upeak_pair.
Qed.

Theorem uecheck_exchange : forall m src dst pss, uvalid_problem m src dst -> exchange m src dst = Some pss ->
  uecheck m src dst [Exch dst] = Ok (mkureport [src; dst] (ubound m src dst) [exchange_recv m pss]).
Proof.
  intros m src dst pss Hv Hx. unfold uecheck, echeck_with. rewrite uproblem_error_none by auto.
  replace (atype_eqb dst dst) with true by (symmetry; apply atype_eqb_spec; auto).
  rewrite (proj1 (uexchange_lower_bound m src dst pss Hx Hv)). do 2 f_equal. apply upeak_pair.
Qed.

(** * The planners

    They read what the exchange's worst device receives from the types (the
    lower bound), not from a schedule: [exchange_total] and
    [exchange_lower_bound] / [uexchange_lower_bound] give the schedule and
    say it receives exactly that. *)

(** **End to end**: on every valid problem the planner answers; either with
    [Pipeline.plan_problem]'s plan (so [Pipelineproof.plan_spec] holds of
    it), or with the exchange, taken only when it receives strictly less than
    that plan and a free dimension [ch] lets it run in pieces; then the
    checker accepts it with the peak [bound src dst] and the lower bound as
    what the worst device receives, and every device assembles its target
    block of any global array. *)
Theorem eplan_spec : forall m src dst, valid_problem m src dst ->
  exists out, eplan_problem m src dst = Ok out /\
  match out with
  | Collectives fs p r => plan_problem m src dst = Ok (fs, p, r)
  | Exchanged och rx =>
      exists ch fs p r pss, och = Some ch /\ plan_problem m src dst = Ok (fs, p, r) /\ exchange m src dst = Some pss /\
      rx = lower_bound m src dst /\ rx < Traffic.traffic (received r) /\
      echeck m src dst [Exch dst] = Ok (mkreport [src; dst] (bound m src dst) [rx]) /\
      (exists D D', nth_error src ch = Some D /\ nth_error dst ch = Some D' /\
         axes D = [] /\ axes D' = [] /\ 2 <= gsize D) /\
      (forall V (A : list nat -> V) j i, j < ndevices m -> in_range m dst i ->
         assemble (fun r => local A m src (coords_of_rank m r)) (sdims m src)
           (tbox m dst (coords_of_rank m j)) (nth j pss []) i = Some (local A m dst (coords_of_rank m j) i))
  end.
Proof.
  intros m src dst Hv. destruct (plan_spec m src dst Hv) as [fs [p [r [Hpp _]]]].
  unfold eplan_problem. rewrite Hpp.
  destruct (free_dim src dst) as [ch|] eqn:Ef; [|eexists; split; [reflexivity|reflexivity]].
  destruct (exchange_total m src dst (valid_uvalid_problem m src dst Hv)) as [pss Ex].
  destruct (Traffic.lower_bound m src dst <? Traffic.traffic (received r)) eqn:Elt;
    [|eexists; split; [reflexivity|reflexivity]].
  eexists. split; [reflexivity|]. cbn beta iota.
  exists ch, fs, p, r, pss. split; [reflexivity|]. apply Nat.ltb_lt in Elt.
  split; auto. split; auto. split; auto. split; [lia|]. split.
  - apply echeck_exchange with pss; auto.
  - split; [apply free_dim_spec; auto|]. intros. apply exchange_correct; auto.
Qed.

(** **End to end, uneven**: on every valid uneven problem the planner
    answers, either with [Upipeline.uplan_problem]'s plan (so
    [Upipelineproof.uplan_spec] holds of it), or with the exchange: along a
    free dimension (run in pieces) when it receives strictly less than that
    plan or that plan's peak exceeds [ubound]; without one, only when that
    plan's peak exceeds [ubound]. Then the uneven checker accepts it with
    the peak [ubound] (the least any plan reaches), every device receives
    exactly the valid elements of its target block that it does not hold,
    and every valid position gets its element of any global array, whatever
    the padding holds. *)
Theorem ueplan_spec : forall m src dst, uvalid_problem m src dst ->
  exists out, ueplan_problem m src dst = Ok out /\
  match out with
  | Collectives fs p r => uplan_problem m src dst = Ok (fs, p, r)
  | Exchanged och rx =>
      exists fs p r pss, uplan_problem m src dst = Ok (fs, p, r) /\ exchange m src dst = Some pss /\
      rx = exchange_recv m pss /\
      uecheck m src dst [Exch dst] = Ok (mkureport [src; dst] (ubound m src dst) [rx]) /\
      match och with
      | Some ch => (rx < Traffic.traffic (ureceived r) \/ ubound m src dst < upeak r) /\
          exists D D', nth_error src ch = Some D /\ nth_error dst ch = Some D' /\
            axes D = [] /\ axes D' = [] /\ 2 <= gsize D
      | None => ubound m src dst < upeak r
      end /\
      uexchange_spec m src dst pss
  end.
Proof.
  intros m src dst Hv. destruct (uplan_spec m src dst Hv) as [fs [p [r [Hpp _]]]].
  unfold ueplan_problem. rewrite Hpp.
  destruct (exchange_total m src dst Hv) as [pss Ex].
  destruct (uexchange_lower_bound m src dst pss Ex Hv) as [Hlb _].
  assert (Hc := uecheck_exchange m src dst pss Hv Ex). rewrite Hlb in Hc.
  assert (Hd := uexchange_spec_holds m src dst pss Ex Hv).
  destruct (free_dim src dst) as [ch|] eqn:Ef.
  - destruct ((ulower_bound m src dst <? Traffic.traffic (ureceived r)) || (ubound m src dst <? upeak r)) eqn:Elt;
      [|eexists; split; [reflexivity|reflexivity]].
    eexists. split; [reflexivity|]. cbn beta iota.
    exists fs, p, r, pss. split; auto. split; auto. split; auto. split; auto. split; [|auto].
    split; [apply orb_true_iff in Elt as [E|E]; apply Nat.ltb_lt in E; auto|]. apply free_dim_spec; auto.
  - destruct (ubound m src dst <? upeak r) eqn:Elt; [|eexists; split; [reflexivity|reflexivity]].
    eexists. split; [reflexivity|]. cbn beta iota.
    exists fs, p, r, pss. split; auto. split; auto. split; auto. split; auto. split; [|auto].
    apply Nat.ltb_lt; auto.
Qed.

(** **The padded bound, always**: with the exchange allowed, every valid
    uneven problem gets a plan whose peak is exactly [ubound], the larger
    padded buffer of the two ends, which no plan goes below
    ([Ucheckerproof.ucheck_peak_ge]): the plan of collectives where it
    stays within it, else the exchange ([exchange_total]: its schedule
    always exists), whose peak the uneven checker reports as [ubound]. *)
Theorem ueplan_peak : forall m src dst, uvalid_problem m src dst ->
  exists out, ueplan_problem m src dst = Ok out /\
  match out with
  | Collectives fs p r => upeak r = ubound m src dst
  | Exchanged _ rx => uecheck m src dst [Exch dst] = Ok (mkureport [src; dst] (ubound m src dst) [rx])
  end.
Proof.
  intros m src dst Hv. destruct (uplan_spec m src dst Hv) as [fs [p [r [Hpp [Hs [_ [Hc _]]]]]]].
  destruct (exchange_total m src dst Hv) as [pss Ex].
  assert (Hge : ubound m src dst <= upeak r).
  { rewrite <- (urefine_ubound m fs) by auto. apply (ucheck_peak_ge _ _ _ _ _ Hc). }
  destruct (ueplan_spec m src dst Hv) as [out [Hout Hcase]]. exists out. split; auto.
  destruct out as [fs' p' r'|och rx].
  - rewrite Hpp in Hcase. injection Hcase as <- <- <-.
    unfold ueplan_problem in Hout. rewrite Hpp in Hout.
    destruct (ubound m src dst <? upeak r) eqn:E.
    + destruct (free_dim src dst); [rewrite orb_true_r in Hout|]; discriminate.
    + apply Nat.ltb_ge in E. lia.
  - destruct Hcase as [fs' [p' [r' [pss' [_ [_ [_ [Hc' _]]]]]]]]. exact Hc'.
Qed.
