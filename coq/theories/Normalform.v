(** Plans in normal form (see [Validate.v]): local sizes along them never
    exceed the larger end ([normal_form_peak]), and along a chain of
    gathers the elements received add up to the growth in local size
    ([gathers_traffic]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate.
Import ListNotations.

(** * Traffic of the gathers *)

(** Along any chain of gathers from [t], the elements received add up to the
    growth of the local size. *)
Theorem gathers_traffic : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  Forall (fun c => is_gather c = true) p ->
  fold_right plus 0 rs + size m t = size m (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hg; [simpl; auto|].
  inversion Hg as [|? ? Hc Hp]; subst.
  destruct (trace_hd _ _ _ _ _ Ht) as [ts' ->].
  rewrite last_cons_ne by discriminate.
  rewrite (last_indep _ (t1 :: ts') t t1) by discriminate. cbn [fold_right].
  rewrite <- IH by (auto; eapply step_wf; eauto).
  destruct c; try discriminate. inversion Hs as [d0 xs0 P g Hnth Hne| | |]; subst.
  simpl. rewrite (size_gather m t d P xs g Hw Hnth).
  assert (0 < nprod m xs).
  { apply nprod_pos; [apply Hw|]. intros a Ha.
    pose proof (wf_nth m t d _ Hw Hnth) as [_ [Hax _]]. apply Hax. simpl. apply in_or_app; auto. }
  destruct (nprod m xs) as [|k]; [lia|]. simpl. nia.
Qed.

(** * Local sizes along a plan in normal form *)

Lemma size_set_nth_le : forall m t d D D', nth_error t d = Some D -> 0 < lsize m D ->
  lsize m D' <= lsize m D -> size m (set_nth t d D') <= size m t.
Proof.
  intros m t d D D' Hd Hp Hle. rewrite !size_prod. rewrite map_set_nth.
  assert (E := prod_set_nth (map (lsize m) t) d (lsize m D') (lsize m D)).
  rewrite nth_error_map, Hd in E. specialize (E eq_refl).
  apply (Nat.mul_le_mono_pos_r _ _ (lsize m D)); auto. rewrite E. nia.
Qed.

Lemma step_size_slice : forall m t d xs t', wf m t -> step m t (DynSlice d xs) t' -> size m t' <= size m t.
Proof.
  intros m t d xs t' Hw Hs. inversion Hs as [|? ? D Hd Hne Hr Hnd Hu Hdiv| |]; subst.
  pose proof (wf_nth m t d D Hw Hd) as HD. pose proof Hw as [Hm _].
  apply (size_set_nth_le m t d D); auto.
  - apply lsize_pos; auto.
  - unfold lsize. simpl. rewrite nprod_app.
    destruct HD as [_ [Hax _]].
    assert (0 < nprod m (axes D)) by (apply nprod_pos; auto).
    assert (0 < nprod m xs) by (apply nprod_pos; auto).
    apply Nat.div_le_compat_l. nia.
Qed.

Lemma step_size_gather : forall m t d xs t', wf m t -> step m t (AllGather d xs) t' -> size m t <= size m t'.
Proof.
  intros m t d xs t' Hw Hs. inversion Hs as [? ? P g Hd Hne| | |]; subst.
  rewrite (size_gather m t d P xs g Hw Hd).
  assert (0 < nprod m xs).
  { apply nprod_pos; [apply Hw|]. intros a Ha.
    pose proof (wf_nth m t d _ Hw Hd) as [_ [Hax _]]. apply Hax. simpl. apply in_or_app; auto. }
  nia.
Qed.

Lemma sizes_gathers : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  forallb is_gather p = true -> forall t', In t' ts -> size m t' <= size m (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hg t' Hin.
  - destruct Hin as [<-|[]]. auto.
  - simpl in Hg. apply andb_true_iff in Hg as [Hc Hp].
    rewrite (trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    destruct Hin as [<-|Hin]; [|apply IH; auto].
    destruct c; try discriminate.
    pose proof (step_size_gather m t d xs t1 Hw Hs).
    destruct (trace_hd _ _ _ _ _ Ht) as [ts' ->].
    pose proof (IH Hw1 Hp t1 (or_introl eq_refl)). lia.
Qed.

Lemma sizes_mid : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  nf_mid p = true -> forall t', In t' ts -> size m t' <= Nat.max (size m t) (size m (last ts t)).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hn t' Hin.
  - destruct Hin as [<-|[]]. lia.
  - assert (Hl := trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    simpl in Hn. destruct (is_mid c) eqn:Ec.
    + rewrite Hl. destruct Hin as [<-|Hin]; [lia|].
      rewrite <- (step_size_mid m t c t1 Hw Hs Ec). apply IH; auto.
    + assert (Htr : trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs)) by (econstructor; eauto).
      pose proof (sizes_gathers m t (c :: p) (t :: ts) _ Htr Hw Hn t' Hin). lia.
Qed.

Lemma sizes_nf : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  nf_slices p = true -> forall t', In t' ts -> size m t' <= Nat.max (size m t) (size m (last ts t)).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hn t' Hin.
  - destruct Hin as [<-|[]]. lia.
  - assert (Hl := trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    simpl in Hn. destruct (is_slice c) eqn:Ec.
    + rewrite Hl. destruct Hin as [<-|Hin]; [lia|].
      destruct c; try discriminate. pose proof (step_size_slice m t d xs t1 Hw Hs).
      pose proof (IH Hw1 Hn t' Hin). lia.
    + assert (Htr : trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs)) by (econstructor; eauto).
      apply (sizes_mid m t (c :: p) (t :: ts) _ Htr Hw Hn t' Hin).
Qed.

(** A plan in normal form never holds more than the larger of its ends. *)
Theorem normal_form_peak : forall m src dst p r, check m src dst p = Ok r -> nf_slices p = true ->
  peak r <= Nat.max (size m src) (size m dst).
Proof.
  intros m src dst p r Hc Hn. apply check_ok_iff in Hc.
  destruct Hc as [[Hs _] [Ht [Hl Hp]]]. rewrite Hp. apply peak_of_le.
  intros t Hin. rewrite <- Hl. eapply sizes_nf; eauto.
Qed.
