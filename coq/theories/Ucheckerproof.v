(** What the uneven checker ([Uchecker.v]) decides and what its success
    means for the data: [uapply_spec] (the function decides the rules),
    [ucheck_ok] (the checker accepts exactly the valid problems with a
    well-typed trace to the target, and reports that trace), [usrc_sound]
    (no padding reaches a valid position, permutes included) and
    [ucheck_correct] / [ucheck_correct_chunked] (end to end, for every global
    array and every padding value). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Permute Uneven Unevenproof Uchecker.
Import ListNotations.

(** * The rules decided *)

Lemma split_okb_spec : forall N C g, 0 < N -> (split_okb N C g = true <-> split_ok N C g).
Proof.
  intros N C g HN. unfold split_okb, split_ok. rewrite orb_true_iff, Nat.eqb_eq, Nat.leb_le.
  rewrite Nat.mod_divide by lia. reflexivity.
Qed.

Lemma nprod_suffix_pos : forall m t d P xs g, wf_uneven m t -> nth_error t d = Some (mkdim (P ++ xs) g) ->
  0 < nprod m xs.
Proof.
  intros m t d P xs g Ht HD. pose proof (wf_uneven_nth m t d _ Ht HD) as [_ Ha]. simpl in Ha.
  apply nprod_pos; [apply Ht|]. intros a Hin. apply Ha, in_or_app; auto.
Qed.

Theorem ucstep_wf : forall m t c t', wf_uneven m t -> ucstep m t c t' -> wf_uneven m t'.
Proof.
  intros m t c t' Ht Hs. destruct Hs as [op t1 Hs|t1 Hw _ _]; [eapply ustep_wf; eauto|exact Hw].
Qed.

Lemma uapply_sound : forall m t c t', wf_uneven m t -> uapply m t c = Ok t' -> ucstep m t c t'.
Proof.
  intros m t c t1 Ht H. pose proof Ht as [Hm [HF Hnd]].
  destruct c as [d xs|d xs|d e xs|t'].
  - cbn [uapply] in H. destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (strip_suffix (x :: xs') (axes D)) as [P|] eqn:HS; [|discriminate].
    destruct (split_okb _ _ _) eqn:Hok; [|discriminate].
    inversion H; subst t1. apply strip_suffix_spec in HS.
    destruct D as [A g]; simpl in HS, Hok |- *; subst A.
    apply ucstep_coll, ustep_gather; auto; [discriminate|].
    apply split_okb_spec in Hok; auto. eapply nprod_suffix_pos; eauto.
  - cbn [uapply] in H. destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (find (fun a => length m <=? a) (x :: xs')) as [a|] eqn:F1; [discriminate|].
    destruct (nodupb (x :: xs')) eqn:ND; cbn [negb] in H; [|discriminate].
    destruct (find (fun a => memb a (used t)) (x :: xs')) as [a|] eqn:F2; [discriminate|].
    assert (Hr : forall a, In a (x :: xs') -> a < length m).
    { intros a Ha. pose proof (find_none _ _ F1 a Ha) as Hf. cbv beta in Hf. apply Nat.leb_gt in Hf. exact Hf. }
    destruct (split_okb _ _ _) eqn:Hok; [|discriminate].
    inversion H; subst t1. apply ucstep_coll, ustep_slice; auto.
    + discriminate.
    + apply nodupb_spec; auto.
    + intros a Ha Hu. pose proof (find_none _ _ F2 a Ha) as Hf. cbv beta in Hf.
      apply memb_spec in Hu. congruence.
    + apply split_okb_spec in Hok; auto. apply nprod_pos; auto.
  - cbn [uapply] in H. destruct (Nat.eqb_spec d e) as [|Hde]; [discriminate|].
    destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct (nth_error t e) as [E|] eqn:HE; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (strip_suffix (x :: xs') (axes D)) as [P|] eqn:HS; [|discriminate].
    destruct (split_okb _ _ _ && split_okb _ _ _) eqn:Hok; [|discriminate].
    inversion H; subst t1. apply strip_suffix_spec in HS. apply andb_true_iff in Hok as [Hok1 Hok2].
    destruct D as [A g]; simpl in HS, Hok1 |- *; subst A.
    assert (HN : 0 < nprod m (x :: xs')) by (eapply nprod_suffix_pos; eauto).
    apply ucstep_coll, ustep_alltoall; auto.
    + discriminate.
    + apply split_okb_spec in Hok1; auto.
    + apply split_okb_spec in Hok2; auto.
  - cbn [uapply] in H. destruct (wf_unevenb m t') eqn:Hw; cbn [negb] in H; [|discriminate].
    destruct (nat_list_eqb (map gsize t') (map gsize t) && nat_list_eqb (dnprods m t') (dnprods m t)) eqn:Hsh;
      [|discriminate].
    inversion H; subst t1. apply andb_true_iff in Hsh as [H1 H2]. apply nat_list_eqb_spec in H1, H2.
    apply ucstep_permute; auto. apply wf_unevenb_spec; auto.
Qed.

Lemma uapply_complete : forall m t c t', wf_uneven m t -> ucstep m t c t' -> uapply m t c = Ok t'.
Proof.
  intros m t c t1 Ht Hs. pose proof Ht as [Hm [HF Hnd]].
  destruct Hs as [op t1 Hs|t' Hw H1 H2].
  - destruct Hs as [d xs P g H Hxs Hok|d xs D H Hxs Hr Hnxs Hu Hok|d e xs P g E Hde H HE Hxs Hokd Hoke].
    + destruct xs as [|x xs']; [congruence|].
      assert (HS : strip_suffix (x :: xs') (P ++ x :: xs') = Some P) by (apply strip_suffix_spec; auto).
      assert (Hb : split_okb (nprod m (x :: xs')) (ucsize m (mkdim P g)) g = true)
        by (apply split_okb_spec; auto; eapply nprod_suffix_pos; eauto).
      cbn [uapply]. rewrite H. cbn [axes gsize]. rewrite HS, Hb. reflexivity.
    + destruct xs as [|x xs']; [congruence|].
      assert (F1 : find (fun a => length m <=? a) (x :: xs') = None).
      { apply find_none_intro. intros a Ha. apply Nat.leb_gt, Hr, Ha. }
      assert (F2 : find (fun a => memb a (used t)) (x :: xs') = None).
      { apply find_none_intro. intros a Ha. destruct (memb a (used t)) eqn:E; auto.
        apply memb_spec in E. exfalso. apply (Hu a); auto. }
      assert (ND : nodupb (x :: xs') = true) by (apply nodupb_spec; auto).
      assert (Hb : split_okb (nprod m (x :: xs')) (ucsize m D) (gsize D) = true)
        by (apply split_okb_spec; auto; apply nprod_pos; auto).
      cbn [uapply]. rewrite H. rewrite F1, ND, F2. cbn [negb]. rewrite Hb. reflexivity.
    + destruct xs as [|x xs']; [congruence|].
      assert (HS : strip_suffix (x :: xs') (P ++ x :: xs') = Some P) by (apply strip_suffix_spec; auto).
      assert (HN : 0 < nprod m (x :: xs')) by (eapply nprod_suffix_pos; eauto).
      assert (Hb1 : split_okb (nprod m (x :: xs')) (ucsize m (mkdim P g)) g = true)
        by (apply split_okb_spec; auto).
      assert (Hb2 : split_okb (nprod m (x :: xs')) (ucsize m E) (gsize E) = true)
        by (apply split_okb_spec; auto).
      cbn [uapply]. destruct (Nat.eqb_spec d e) as [|_]; [contradiction|].
      rewrite H, HE. cbn [axes gsize]. rewrite HS, Hb1, Hb2. reflexivity.
  - cbn [uapply]. apply wf_unevenb_spec in Hw. rewrite Hw. cbn [negb]. rewrite H1, H2.
    rewrite (proj2 (nat_list_eqb_spec _ _) eq_refl), (proj2 (nat_list_eqb_spec _ _) eq_refl). reflexivity.
Qed.

(** The function decides the relation. *)
Theorem uapply_spec : forall m t c t', wf_uneven m t -> (uapply m t c = Ok t' <-> ucstep m t c t').
Proof. split; [apply uapply_sound|apply uapply_complete]; auto. Qed.

(** * Running the rules *)

Lemma utrace_nonempty : forall m t p ts rs, utrace m t p ts rs -> ts <> [].
Proof. intros m t p ts rs H. destruct H; discriminate. Qed.

Lemma urun_utrace : forall m p t i ts rs, wf_uneven m t -> urun m t p i = Ok (ts, rs) -> utrace m t p ts rs.
Proof.
  intros m p. induction p as [|op p IH]; intros t i ts rs Hwf H; cbn [urun] in H.
  - inversion H; subst. constructor.
  - destruct (uapply m t op) as [t1|e] eqn:Ha; [|discriminate].
    destruct (urun m t1 p (S i)) as [[ts' rs']|x] eqn:Hr; [|discriminate].
    inversion H; subst. apply uapply_sound in Ha; auto.
    constructor; auto. apply (IH t1 (S i)); auto. eapply ucstep_wf; eauto.
Qed.

Lemma utrace_urun : forall m t p ts rs, wf_uneven m t -> utrace m t p ts rs -> forall i, urun m t p i = Ok (ts, rs).
Proof.
  intros m t p ts rs Hwf H. induction H as [t|t op t1 p ts rs Hs Ht IH]; intros i.
  - reflexivity.
  - cbn [urun]. rewrite (uapply_complete m t op t1 Hwf Hs).
    rewrite IH by (eapply ucstep_wf; eauto). reflexivity.
Qed.

Lemma utrace_wf_all : forall m t p ts rs, utrace m t p ts rs -> wf_uneven m t -> Forall (wf_uneven m) ts.
Proof.
  intros m t p ts rs H. induction H as [t|t op t1 p ts rs Hs Ht IH]; intros Hw; constructor; auto.
  apply IH. eapply ucstep_wf; eauto.
Qed.

Lemma uproblem_error_none : forall m src dst, uvalid_problem m src dst -> uproblem_error m src dst = None.
Proof.
  intros m src dst [Hs [Hd Hg]].
  apply (problem_error_with_none wf_uneven); auto. apply wf_unevenb_spec. intros t [Hm _]. exact Hm.
Qed.

Lemma uproblem_error_spec : forall m src dst, uproblem_error m src dst = None -> uvalid_problem m src dst.
Proof.
  intros m src dst H. exact (problem_error_with_ok wf_uneven _ _ m src dst (wf_unevenb_spec m) H).
Qed.

Lemma upeak_of_le : forall m ts b, upeak_of m ts <= b <-> Forall (fun t => usize_padded m t <= b) ts.
Proof.
  intros m ts b. induction ts as [|t ts IH]; cbn [upeak_of fold_right].
  - split; [constructor|lia].
  - fold (upeak_of m ts). rewrite Forall_cons_iff, <- IH. lia.
Qed.

(** The checker accepts exactly a valid problem with a trace of well-typed
    steps from [src] ending at [dst]; its report holds that trace's types,
    received counts and peak (the largest padded buffer along it). *)
Theorem ucheck_ok : forall m src dst p r, ucheck m src dst p = Ok r <->
  uvalid_problem m src dst /\ utrace m src p (utypes r) (ureceived r) /\
  last (utypes r) src = dst /\ upeak r = upeak_of m (utypes r).
Proof.
  intros m src dst p r. split.
  - intros H. unfold ucheck in H.
    destruct (uproblem_error m src dst) eqn:Hpe; [discriminate|].
    apply uproblem_error_spec in Hpe. pose proof Hpe as [Hs [Hd _]].
    destruct (urun m src p 1) as [[ts rs]|x] eqn:Hr; [|discriminate].
    destruct (atype_eqb (last ts src) dst) eqn:He; [|discriminate].
    inversion H; subst r. cbn [utypes ureceived upeak]. apply atype_eqb_spec in He.
    apply urun_utrace in Hr; auto.
  - intros [Hv [Ht [Hl Hp]]]. unfold ucheck. rewrite (uproblem_error_none m src dst Hv).
    rewrite (utrace_urun m src p _ _ (proj1 Hv) Ht 1). rewrite Hl, (proj2 (atype_eqb_spec dst dst) eq_refl).
    destruct r as [ts pk rs]; cbn [utypes upeak ureceived] in *. subst pk. reflexivity.
Qed.

(** * Permutes between uneven types *)

(** The even type with one element per block: same axes, so the same
    blocks, and the same permute source. *)
Definition shadow (m : mesh) (t : atype) : atype := map (fun D => mkdim (axes D) (nprod m (axes D))) t.

Lemma used_shadow : forall m t, used (shadow m t) = used t.
Proof. intros m t. unfold used, shadow. induction t as [|D t IH]; simpl; [reflexivity|rewrite IH; reflexivity]. Qed.

Lemma blocks_shadow : forall m t c, blocks m (shadow m t) c = blocks m t c.
Proof. intros. unfold blocks, shadow. rewrite map_map. reflexivity. Qed.

Lemma perm_src_shadow : forall m t t' c, perm_src m (shadow m t) (shadow m t') c = perm_src m t t' c.
Proof. intros. unfold perm_src, gained, replicated. rewrite !used_shadow. reflexivity. Qed.

Lemma wf_shadow : forall m t, wf_uneven m t -> wf m (shadow m t).
Proof.
  intros m t [Hm [HF Hnd]]. split; [exact Hm|split].
  - unfold shadow. apply Forall_map. eapply Forall_impl; [|exact HF]. intros D [Hg Ha].
    unfold wf_dim; simpl. repeat split; auto; [apply nprod_pos; auto|apply Nat.divide_refl].
  - rewrite used_shadow. exact Hnd.
Qed.

Lemma shadow_same : forall m t t', dnprods m t' = dnprods m t -> same_local_shape m (shadow m t) (shadow m t').
Proof.
  intros m t t' H. unfold same_local_shape.
  assert (E1 : forall u, map gsize (shadow m u) = dnprods m u) by (intros; unfold shadow, dnprods; rewrite map_map; reflexivity).
  assert (E2 : forall u, map (lsize m) (shadow m u) = map (fun n => n / n) (dnprods m u))
    by (intros; unfold shadow, dnprods; rewrite !map_map; reflexivity).
  rewrite !E1, !E2, H. split; reflexivity.
Qed.

Lemma nth_map_dim : forall (f g : dim -> nat) t t' j, map f t = map g t' -> f dflt = g dflt ->
  f (nth j t dflt) = g (nth j t' dflt).
Proof. intros f g t t' j H Hd. rewrite <- (map_nth f), <- (map_nth g), H, Hd. reflexivity. Qed.

(** * No padding reaches a valid position *)

(** For every rule, permutes included: every valid position of every
    device's output is read from a valid position of a real device's input
    holding the same global index. *)
Theorem usrc_sound : forall m t op t' c i,
  wf_uneven m t -> ucstep m t op t' -> valid m c -> uvalid_pos m t' c i ->
  exists c' i', usrc m t op t' c i = Some (c', i') /\
    valid m c' /\ uvalid_pos m t c' i' /\ ugindex m t c' i' = ugindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi. destruct Hs as [op t1 Hs|t1 Hw Hg Hn].
  - assert (E : usrc m t op t1 c i = usource m t op t1 c i) by (destruct Hs; reflexivity).
    rewrite E. apply usource_sound; auto.
  - exists (perm_src m t t1 c), i. split; [reflexivity|].
    pose proof (wf_shadow m t Ht) as Hs. pose proof (wf_shadow m t1 Hw) as Hs1.
    pose proof (shadow_same m t t1 Hn) as Hsl.
    pose proof (perm_src_blocks m _ _ c Hs Hs1 Hsl Hc) as Hb.
    pose proof (perm_src_valid m _ _ c Hs Hs1 Hsl Hc) as Hv.
    rewrite !blocks_shadow, perm_src_shadow in Hb. rewrite perm_src_shadow in Hv.
    set (c' := perm_src m t t1 c) in *. unfold blocks in Hb.
    assert (Hlen : length t1 = length t) by (rewrite <- (map_length gsize t1), Hg, map_length; reflexivity).
    assert (Hdf : forall c0, block m dflt c0 = 0) by (intros; unfold block, dflt; cbn [axes]; apply mr_nil).
    assert (HB : forall j, block m (nth j t dflt) c' = block m (nth j t1 dflt) c)
      by (intros j; apply (nth_map_dim (fun D => block m D c') (fun D => block m D c)); auto; rewrite !Hdf; auto).
    assert (HG : forall j, gsize (nth j t dflt) = gsize (nth j t1 dflt))
      by (intros j; apply nth_map_dim; auto).
    assert (HN : forall j, nprod m (axes (nth j t dflt)) = nprod m (axes (nth j t1 dflt)))
      by (intros j; apply (nth_map_dim (fun D => nprod m (axes D)) (fun D => nprod m (axes D))); auto).
    assert (HC : forall j, ucsize m (nth j t dflt) = ucsize m (nth j t1 dflt))
      by (intros j; unfold ucsize; rewrite HG, HN; reflexivity).
    apply uvalid_pos_iff in Hi as [Hil Hij]. rewrite Hlen in Hil, Hij.
    split; [exact Hv|split].
    + apply uvalid_pos_iff. split; auto. intros j Hj. specialize (Hij j Hj).
      unfold uvlen in *. rewrite HG, HN, HB. exact Hij.
    + apply ugindex_ext; auto. intros j Hj. unfold ugidx. rewrite HB, HC. reflexivity.
Qed.

(** * End to end *)

(** [x] holds, at every valid position of every device, the element of [A]
    its type says. *)
Definition urep {V} (A : list nat -> V) (m : mesh) (t : atype) (x : coords -> list nat -> V) : Prop :=
  forall c i, valid m c -> uvalid_pos m t c i -> x c i = A (ugindex m t c i).

Lemma umove_rep : forall V (A : list nat -> V) pad m t op t' x, wf_uneven m t -> ucstep m t op t' ->
  urep A m t x -> urep A m t' (umove pad m t op t' x).
Proof.
  intros V A pad m t op t' x Ht Hs Hx c i Hc Hi. unfold umove.
  destruct (usrc_sound m t op t' c i Ht Hs Hc Hi) as [c' [i' [-> [Hc' [Hv Hg]]]]].
  rewrite <- Hg. apply Hx; auto.
Qed.

Lemma uexec_trace : forall V (A : list nat -> V) pad m t p ts rs, utrace m t p ts rs -> wf_uneven m t ->
  forall x, urep A m t x -> urep A m (last ts t) (uexec pad m t p x).
Proof.
  intros V A pad m t p ts rs H. induction H as [t|t op t1 p ts rs Hs Ht IH]; intros Hw x Hx.
  - exact Hx.
  - cbn [uexec]. rewrite (uapply_complete m t op t1 Hw Hs).
    pose proof (utrace_nonempty _ _ _ _ _ Ht) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne.
    apply IH; [eapply ucstep_wf; eauto|]. apply umove_rep; auto.
Qed.

(** **End to end, padded**: for a plan the checker accepts, every global
    array [A] and every padding value [pad], running the plan on the padded
    distribution of [A] (composing [usrc] step by step, fresh padding where
    a slice pads) leaves at every valid position of every device the element
    of [A] at the global index its target type says: no padding reaches a
    valid position. *)
Theorem ucheck_correct : forall m src dst p r, ucheck m src dst p = Ok r ->
  forall V (A : list nat -> V) (pad : V) c i, valid m c -> uvalid_pos m dst c i ->
  uexec pad m src p (ulocal A pad m src) c i = A (ugindex m dst c i).
Proof.
  intros m src dst p r H V A pad c i Hc Hi.
  apply ucheck_ok in H as [[Hs _] [Ht [Hl _]]].
  pose proof (uexec_trace V A pad m src p _ _ Ht Hs (ulocal A pad m src)) as E.
  rewrite Hl in E. apply E; auto. intros c' i' _ Hv. apply ulocal_valid; auto.
Qed.

(** **End to end, chunked** ([torch.chunk]): whatever the buffers hold
    beyond the chunks (the padding the padded run adds), if every position of
    every device's chunked source buffer holds its element of [A], then every
    position of every device's chunked target buffer does after the plan. *)
Theorem ucheck_correct_chunked : forall m src dst p r, ucheck m src dst p = Ok r ->
  forall V (A : list nat -> V) (pad : V) x,
    (forall c i, valid m c -> urange Chunked m src c i -> x c i = A (ugindex m src c i)) ->
    forall c i, valid m c -> urange Chunked m dst c i -> uexec pad m src p x c i = A (ugindex m dst c i).
Proof.
  intros m src dst p r H V A pad x Hx c i Hc Hi.
  apply ucheck_ok in H as [[Hs _] [Ht [Hl _]]].
  pose proof (uexec_trace V A pad m src p _ _ Ht Hs x) as E.
  rewrite Hl in E. apply urange_chunked_valid in Hi.
  apply E; auto.
Qed.

(** The reported peak bounds every padded buffer along the plan. *)
Theorem ucheck_peak : forall m src dst p r, ucheck m src dst p = Ok r ->
  Forall (fun t => usize_padded m t <= upeak r) (utypes r).
Proof.
  intros m src dst p r H. apply ucheck_ok in H as [_ [_ [_ Hp]]]. apply upeak_of_le. lia.
Qed.

Lemma upeak_of_ge : forall m ts t, In t ts -> usize_padded m t <= upeak_of m ts.
Proof.
  intros m ts t H. induction ts as [|u ts IH]; [destruct H|].
  cbn [upeak_of fold_right]. fold (upeak_of m ts). destruct H as [->|H]; [lia|]. specialize (IH H). lia.
Qed.

Lemma in_last : forall A (l : list A) d, l <> [] -> In (last l d) l.
Proof.
  intros A l d H. induction l as [|x l IH]; [congruence|].
  destruct l as [|y l]; [left; reflexivity|]. right. apply IH. discriminate.
Qed.

(** No accepted plan peaks below [ubound]: the source and the target are on
    every plan. So a plan whose reported peak is [ubound] has the least
    peak of any plan. *)
Theorem ucheck_peak_ge : forall m src dst p r, ucheck m src dst p = Ok r -> ubound m src dst <= upeak r.
Proof.
  intros m src dst p r H. apply ucheck_ok in H as [_ [Ht [Hl Hp]]]. rewrite Hp. unfold ubound.
  pose proof (utrace_nonempty _ _ _ _ _ Ht) as Hne.
  assert (Hs : In src (utypes r)) by (inversion Ht; left; reflexivity).
  assert (Hd : In dst (utypes r)) by (rewrite <- Hl; apply in_last; exact Hne).
  pose proof (upeak_of_ge m _ _ Hs). pose proof (upeak_of_ge m _ _ Hd). lia.
Qed.
